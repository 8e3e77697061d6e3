package daemon

import (
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/thawqueue"
)

// waitPrefix + a thaw's arrival number: a thaw waiting for GPU memory, in
// placement's queue so that jobs do not take the memory it waits for
// ahead of its turn.
const waitPrefix = "wait:"

// waitID is the placement ID of the seq-th thaw to arrive at the queue.
func waitID(seq uint64) string { return waitPrefix + strconv.FormatUint(seq, 10) }

// waitingThaws are thaws waiting for memory as placement requests:
// pinned to their GPUs, at their process's priority and place in line,
// round-robin with the queued jobs of every user. Placement starting one
// charges its memory for the rest of the pass, and a starving one holds
// its GPUs; the thaw queue itself admits it (thawStarted).
func waitingThaws(ws []thawqueue.Waiter) []placement.Job {
	out := make([]placement.Job, 0, len(ws))
	for _, w := range ws {
		pj := placement.Job{ID: waitID(w.Seq), Owner: w.Owner, Priority: w.Priority,
			Seq: w.Line<<seqShift | w.Seq&(1<<seqShift-1), QueuedAt: w.Since, Only: sortedKeys(w.Need), Pinned: true}
		for _, mib := range w.Need {
			pj.VRAMMiB = max(pj.VRAMMiB, mib)
		}
		if pj.GPUs = len(pj.Only); pj.GPUs > 0 {
			out = append(out, pj)
		}
	}
	return out
}

// startedWaits are the waiting thaws plan kept room for, by placement ID:
// a GPU held for starving work later in the pass is not held against them.
func startedWaits(plan placement.Plan) map[string]bool {
	var out map[string]bool
	for _, s := range plan.Starts {
		if strings.HasPrefix(s.JobID, waitPrefix) {
			if out == nil {
				out = map[string]bool{}
			}
			out[s.JobID] = true
		}
	}
	return out
}

// lastJobSeq is the sequence number of the job submitted last (0: none):
// a request made now goes after it in line.
func (d *Daemon) lastJobSeq() uint64 {
	if v := d.jobs.View(); len(v) > 0 {
		return v[len(v)-1].Seq
	}
	return 0
}
