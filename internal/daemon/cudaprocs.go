package daemon

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// cudaProcs lists the CUDA processes of rec's tree from a fresh GPU sample,
// each with its memory per GPU: what a freeze must checkpoint.
func (d *Daemon) cudaProcs(ctx context.Context, rec proctable.Record) ([]proctable.CheckpointProc, error) {
	if err := d.sampler.refresh(ctx); err != nil {
		return nil, fmt.Errorf("sample GPUs: %w", err)
	}
	gv := d.gpuView()
	byPID := map[int]*proctable.CheckpointProc{}
	for _, p := range gv.procs {
		if gv.owner[p.PID] != rec.ID {
			continue
		}
		cp := byPID[p.PID]
		if cp == nil {
			start, err := procfs.StartTime(p.PID)
			if err != nil {
				continue // exited since the sample
			}
			cp = &proctable.CheckpointProc{PID: p.PID, Start: start, VRAM: map[string]uint64{}}
			byPID[p.PID] = cp
		}
		cp.VRAM[p.UUID] += p.UsedMiB
	}
	out := make([]proctable.CheckpointProc, 0, len(byPID))
	for _, cp := range byPID {
		out = append(out, *cp)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// pidsOf lists the pids of procs.
func pidsOf(procs []proctable.CheckpointProc) []int {
	out := make([]int, len(procs))
	for i, p := range procs {
		out[i] = p.PID
	}
	return out
}

// liveProcs drops the processes that exited (or whose pid was reused)
// since they were recorded.
func liveProcs(procs []proctable.CheckpointProc) []proctable.CheckpointProc {
	out := make([]proctable.CheckpointProc, 0, len(procs))
	for _, p := range procs {
		if procfs.Alive(p.PID, p.Start) {
			out = append(out, p)
		}
	}
	return out
}

// checkpointed lists the CUDA processes a freeze recorded for rec.
func checkpointed(rec proctable.Record) []proctable.CheckpointProc {
	if rec.Checkpoint == nil {
		return nil
	}
	return rec.Checkpoint.Procs
}
