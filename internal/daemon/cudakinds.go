package daemon

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/cudakind"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// Some kinds of CUDA process cannot be checkpointed by NVIDIA's driver
// (docs/hardware.md, "Supported process kinds"). A freeze looks at the
// memory map of each CUDA process of the tree first and refuses, changing
// nothing, the kinds it can see; a kind it cannot see is caught by the
// lock's timeout, and the freeze rolls back.

// cudaKinds inspects each of procs; a process whose map cannot be read
// (it exited) is of no known kind.
func cudaKinds(procs []proctable.CheckpointProc) map[int]cudakind.Kind {
	out := make(map[int]cudakind.Kind, len(procs))
	for _, p := range procs {
		if k, err := cudakind.Inspect(p.PID); err == nil {
			out[p.PID] = k
		}
	}
	return out
}

// refuseKinds refuses to freeze name when one of procs is of a kind the
// driver cannot checkpoint.
func refuseKinds(name string, procs []proctable.CheckpointProc, kinds map[int]cudakind.Kind) error {
	for _, p := range procs { // sorted by pid
		if why := kinds[p.PID].Unsupported(); len(why) > 0 {
			return api.Errorf(api.CodeUnavailable, "process %q cannot be frozen: its CUDA process %d %s; nothing was changed",
				name, p.PID, strings.Join(why, "; and it "))
		}
	}
	return nil
}

// kindHint adds to a failed freeze what may explain it: a lock that timed
// out in a tree where a process loads NCCL (the driver hangs on a rank of
// an NCCL communicator while another rank is locked,
// NVIDIA/cuda-checkpoint#30), or a checkpoint the driver could not make
// (not checkpointable, or a plain failure) where a process maps the UVM
// device (managed memory, which the driver does not checkpoint). Other
// failures, out of memory among them, have causes of their own.
func kindHint(err error, kinds map[int]cudakind.Kind) error {
	if err == nil {
		return nil
	}
	for _, pid := range slices.Sorted(maps.Keys(kinds)) {
		switch k := kinds[pid]; {
		case k.NCCL && errors.Is(err, checkpoint.ErrTimeout):
			return fmt.Errorf("%w (process %d loads NCCL: cuda-checkpoint cannot lock a rank of an NCCL communicator while another rank is locked, NVIDIA/cuda-checkpoint#30)", err, pid)
		case k.UVM && (errors.Is(err, checkpoint.ErrNotCheckpointable) || errors.Is(err, checkpoint.ErrFailed)):
			return fmt.Errorf("%w (process %d maps /dev/nvidia-uvm: if it uses managed memory, cudaMallocManaged, cuda-checkpoint cannot checkpoint it, as its README says)", err, pid)
		}
	}
	return err
}
