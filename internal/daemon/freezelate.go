package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
)

// lateRounds bounds how often one freeze goes back for CUDA processes that
// appeared in the tree while it ran.
const lateRounds = 3

// quiesce ends a freeze whose known CUDA processes are all checkpointed. It
// stops the tree (when asked), then samples the GPUs again for CUDA
// processes of the tree the freeze has not checkpointed: a child that made
// its first allocation after the freeze listed them. Those are recorded,
// the tree is continued (the driver needs their threads running), they are
// locked and checkpointed, and the tree is stopped again. It returns the
// record and the processes left stopped; on error the caller rolls op back.
func (d *Daemon) quiesce(ctx context.Context, rec proctable.Record, op *cudaOp, opts freezeOpts) (proctable.Record, []proctable.ProcRef, error) {
	for round := 1; ; round++ {
		var stopped []proctable.ProcRef
		if opts.stop {
			t := time.Now()
			op.reach.daemonStops(true)
			var err error
			if stopped, err = d.stopTree(rec.InitPID, rec.Owner.UID); err != nil {
				d.log.Warn("stop frozen tree", zap.String("name", rec.Name), zap.Error(err))
			}
			op.ms["stop"] += msSince(t)
		}
		late, err := d.lateProcs(ctx, rec, op)
		if err != nil {
			// The freeze stands as far as the driver can tell; the next
			// sample shows any process it missed.
			d.log.Warn("look for CUDA processes that started during a freeze", zap.String("name", rec.Name), zap.Error(err))
			return rec, stopped, nil
		}
		if len(late) == 0 {
			return rec, stopped, nil
		}
		if err := continueTree(stopped); err != nil {
			d.log.Warn("continue tree", zap.String("name", rec.Name), zap.Error(err))
		}
		op.reach.daemonStops(false)
		if round == lateRounds {
			return rec, nil, conflictf("new CUDA processes (pids %v) kept appearing in the tree of %q while it was frozen; try again", pidsOf(late), rec.Name)
		}
		d.log.Info("freeze: CUDA processes started during the freeze", zap.String("name", rec.Name), zap.Ints("pids", pidsOf(late)))
		if !opts.toDisk {
			// The room of the whole tree: makeRoom counts no process of rec's.
			whole := rec.Checkpoint.MiB() + (&proctable.Checkpoint{Procs: late}).MiB()
			if err := d.makeRoom(ctx, fmt.Sprintf("freeze %q", rec.Name), whole, rec.Key()); err != nil {
				return rec, nil, err
			}
		}
		// Recorded before they are touched, so that a restart settles them too.
		updated, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
			if r.ID != rec.ID || r.Checkpoint == nil {
				return errReplaced
			}
			r.Checkpoint.Procs = append(r.Checkpoint.Procs, late...)
			return nil
		})
		if err != nil {
			return rec, nil, err
		}
		rec = updated
		op.add(late)
		if err := op.freeze(ctx, opts.lockTimeout); err != nil {
			return rec, nil, err
		}
	}
}

// lateProcs lists the CUDA processes of rec's tree that op does not hold.
func (d *Daemon) lateProcs(ctx context.Context, rec proctable.Record, op *cudaOp) ([]proctable.CheckpointProc, error) {
	now, err := d.cudaProcs(ctx, rec)
	if err != nil {
		return nil, err
	}
	return missingFrom(now, op.procs), nil
}

// missingFrom lists the processes of procs that known lacks, by pid and
// start time.
func missingFrom(procs, known []proctable.CheckpointProc) []proctable.CheckpointProc {
	have := map[proctable.ProcRef]bool{}
	for _, p := range known {
		have[proctable.ProcRef{PID: p.PID, Start: p.Start}] = true
	}
	var out []proctable.CheckpointProc
	for _, p := range procs {
		if !have[proctable.ProcRef{PID: p.PID, Start: p.Start}] {
			out = append(out, p)
		}
	}
	return out
}
