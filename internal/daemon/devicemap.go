package daemon

import (
	"slices"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/proctable"
)

// A restore onto other GPUs hands the driver a device map, and NVIDIA's
// driver takes only a complete one: "If an array of GPU UUID pairs is
// specified, it must contain every checkpointed GPU"
// (cuCheckpointProcessRestore, CUDA driver API reference), and a map that
// names only the GPU that moves fails with "invalid argument"
// (NVIDIA/cuda-checkpoint#35). The GPU restored onto must also be "of the
// same chip type as the old GPU" (ibid.; NVIDIA/cuda-checkpoint#18), which
// the daemon checks before anything is touched.

// deviceMap is the map a restore sends when moves move any GPU: every GPU
// the process was given and every GPU its CUDA processes held memory on,
// each paired with where it goes, those that stay paired with themselves.
// It is nil when nothing moves (a plain restore, in place).
func deviceMap(gpus []string, procs []proctable.CheckpointProc, moves []checkpoint.GPUPair) []checkpoint.GPUPair {
	if len(moves) == 0 {
		return nil
	}
	_, remap := remapGPUs(nil, moves)
	var out []checkpoint.GPUPair
	add := func(uuid string) {
		if !slices.ContainsFunc(out, func(p checkpoint.GPUPair) bool { return p.Old == uuid }) {
			out = append(out, checkpoint.GPUPair{Old: uuid, New: remap(uuid)})
		}
	}
	for _, g := range gpus {
		add(g)
	}
	for _, p := range procs {
		for _, uuid := range sortedKeys(p.VRAM) {
			add(uuid)
		}
	}
	for _, m := range moves {
		add(m.Old)
	}
	return out
}

// sameChips refuses moves onto a GPU of another chip type than the one it
// leaves, told apart by the GPUs' names; a GPU the last sample does not
// know is left to the checks that resolved it.
func (d *Daemon) sameChips(what string, moves []checkpoint.GPUPair) error {
	gv := d.gpuView()
	for _, m := range moves {
		from, ok1 := gv.device(m.Old)
		to, ok2 := gv.device(m.New)
		if ok1 && ok2 && from.Name != to.Name {
			return invalidf("%s: GPU %d is a %s and GPU %d a %s: CUDA restores a process only onto GPUs of the chip type it was checkpointed on",
				what, from.Index, from.Name, to.Index, to.Name)
		}
	}
	return nil
}

// remapGPUs applies pairs to a process's GPU list and returns the new list
// and the mapping as a function (identity without pairs).
func remapGPUs(gpus []string, pairs []checkpoint.GPUPair) ([]string, func(string) string) {
	m := map[string]string{}
	for _, p := range pairs {
		m[p.Old] = p.New
	}
	remap := func(uuid string) string {
		if n, ok := m[uuid]; ok {
			return n
		}
		return uuid
	}
	out := slices.Clone(gpus)
	for i, g := range out {
		out[i] = remap(g)
	}
	return out, remap
}

func remapVRAM(vram map[string]uint64, remap func(string) string) map[string]uint64 {
	out := make(map[string]uint64, len(vram))
	for uuid, mib := range vram {
		out[remap(uuid)] += mib
	}
	return out
}
