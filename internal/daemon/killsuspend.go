package daemon

import (
	"context"

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
// down none. A failure is logged and the kill goes on: a kill is never
// refused. The caller holds rec's lifecycle lock.
func (d *Daemon) suspendRestored(rec proctable.Record) {
	if !rec.Restored || rec.State != api.StateRunning || d.driver == nil {
		return
	}
	ctx := context.Background()
	procs, err := d.cudaProcs(ctx, rec)
	if err == nil && len(procs) > 0 {
		err = d.newCudaOp(procs, checkpoint.StateRunning).freeze(ctx, d.cfg.LockTimeout)
	}
	if err != nil {
		d.log.Warn("suspend a restored tree before its kill (NVIDIA/cuda-checkpoint#53); killing it anyway",
			zap.String("name", rec.Name), zap.Error(err))
	}
}
