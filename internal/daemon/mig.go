package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// A GPU in MIG mode is shared out as MIG instances, each with its own
// memory and its own UUID, while the daemon places, reserves and
// checkpoints whole GPUs; and cuda-checkpoint does not support MIG (its
// checkpoint fails with "out of memory" on a MIG instance, and the
// maintainers answer that MIG is not supported: NVIDIA/cuda-checkpoint#42).
// So such a GPU is left alone: nothing is placed, started, leased, filled
// or frozen on it, and gpus and hello say why.

// migNote is the sentence that says why GPU dv is left alone; "" unless
// it is in MIG mode.
func migNote(dv gpu.Device) string {
	if !dv.MIG {
		return ""
	}
	return fmt.Sprintf("GPU %d: MIG mode is on: gpusched uses whole GPUs and cuda-checkpoint does not support MIG (NVIDIA/cuda-checkpoint#42), so nothing is placed, started or frozen on it", dv.Index)
}

// migNotes lists migNote for every GPU of the view in MIG mode; [] when none is.
func (v *gpuView) migNotes() []string {
	out := []string{}
	for _, dv := range v.devices {
		if note := migNote(dv); note != "" {
			out = append(out, note)
		}
	}
	return out
}

// inMIG reports whether the GPU with this UUID is in MIG mode.
func (v *gpuView) inMIG(uuid string) bool {
	dv, ok := v.device(uuid)
	return ok && dv.MIG
}

// migError refuses an operation (what) aimed at GPUs (UUIDs) of which one
// is in MIG mode; nil when none is.
func (v *gpuView) migError(what string, uuids []string) error {
	for _, uuid := range uuids {
		if dv, ok := v.device(uuid); ok && dv.MIG {
			return api.Errorf(api.CodeUnavailable, "%s: %s", what, migNote(dv))
		}
	}
	return nil
}
