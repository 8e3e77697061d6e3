package daemon

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// Killing a live process whose CUDA state cuda-checkpoint restored can take
// the whole host down: NVIDIA/cuda-checkpoint#53 (bare metal, open kernel
// module 595.71.05) reports a hard hang about 35 s after the kill, 4 times
// out of 4, and none after a checkpoint ("after a checkpoint the process
// is left suspended and you can kill it freely"). Its workaround, lock and
// checkpoint before SIGTERM, is what a kill of such a tree does first.

// suspendRestored locks and checkpoints the CUDA processes of rec's tree
// when they run restored contexts, so that the kill that follows tears
// down none. It is recorded as a freeze: freezing while the driver works,
// then the state the driver left, so that a daemon killed before the
// kill's signals end the tree finds the process as it is (settleInterrupted)
// rather than running with its CUDA processes suspended. A failure is
// logged and the kill goes on: a kill is never refused. The caller holds
// rec's lifecycle lock.
func (d *Daemon) suspendRestored(rec proctable.Record) {
	if !rec.Restored || rec.State != api.StateRunning || d.driver == nil {
		return
	}
	ctx := context.Background()
	procs, err := d.cudaProcs(ctx, rec)
	if err == nil && len(procs) > 0 {
		err = d.suspendRecorded(ctx, rec, procs)
	}
	if err != nil {
		d.log.Warn("suspend a restored tree before its kill (NVIDIA/cuda-checkpoint#53); killing it anyway",
			zap.String("name", rec.Name), zap.Error(err))
	}
}

// suspendRecorded is suspendRestored's freeze of procs, recorded.
func (d *Daemon) suspendRecorded(ctx context.Context, rec proctable.Record, procs []proctable.CheckpointProc) error {
	rec, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Checkpoint = api.StateFreezing, &proctable.Checkpoint{Procs: procs}
		return nil
	})
	if err != nil {
		return err
	}
	op := d.newCudaOp(procs, checkpoint.StateRunning)
	ferr := op.freeze(ctx, d.cfg.LockTimeout)
	if ferr != nil {
		op.query(ctx)
	}
	state := op.verdict(api.StateRunning)
	_, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State = state
		switch {
		case state == api.StateRunning:
			r.Checkpoint = nil
		case r.Checkpoint != nil:
			r.Checkpoint.Procs = op.procs
		}
		if ferr != nil {
			r.Error = fmt.Sprintf("suspend before kill: %v", ferr)
		}
		return nil
	})
	if ferr != nil {
		return ferr
	}
	return err
}
