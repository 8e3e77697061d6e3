package daemon

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// After a restore that ran out of GPU memory, NVIDIA's driver fails every
// later restore of the process with CUDA_ERROR_OPERATING_SYSTEM and refuses
// to unlock it, even once the memory is free: "The process is permanently
// stuck ... The only option is to kill the process" (NVIDIA/cuda-checkpoint#44,
// driver 580); the tool's README says it "does not attempt to keep the
// process in a good state if an error ... is encountered during checkpoint
// or restore". So such a process is not left frozen, for users and
// placement to thaw again and again: it is reported failed with the reason,
// a freeze refuses it, and only a thaw its owner asks for tries the driver
// again (and succeeds on a driver that has fixed this).

// lostReason is the reason recorded for a process whose restore ran out of
// memory.
const lostReason = "a restore ran out of GPU memory, after which NVIDIA's driver cannot restore the process again " +
	"(NVIDIA/cuda-checkpoint#44): its GPU state is lost; kill it"

// unrestorable is why the driver can no longer restore rec's GPU state, or "".
func unrestorable(rec proctable.Record) string {
	if rec.Checkpoint == nil {
		return ""
	}
	return rec.Checkpoint.Unrestorable
}

// restoreLost records that rec's GPU state cannot be restored after a
// thaw's restore failed with cause (what it did restore has been
// checkpointed again): the process is failed, saying why.
func (d *Daemon) restoreLost(rec proctable.Record, op *cudaOp, what string, cause error) (api.CheckpointResult, error) {
	msg := fmt.Sprintf("%s failed: %v; %s", what, cause, lostReason)
	_, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Error = api.StateFailed, msg
		if r.Checkpoint != nil {
			r.Checkpoint.Procs, r.Checkpoint.Unrestorable = op.procs, lostReason
		}
		return nil
	})
	d.sampler.kick()
	d.log.Error(what+" failed; the process cannot be restored", zap.String("name", rec.Name), zap.Error(cause))
	if err != nil {
		return api.CheckpointResult{}, fmt.Errorf("%s %q: %w (and recording the outcome failed: %v)", what, rec.Name, cause, err)
	}
	return api.CheckpointResult{}, fmt.Errorf("%s %q: %w; %s; the process is now failed", what, rec.Name, cause, lostReason)
}
