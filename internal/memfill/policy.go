package memfill

// params are what the controller sets: the device usage to hold the GPU
// at, and the memory to keep free on top of what the target leaves.
type params struct {
	targetMiB  uint64
	reserveMiB uint64
}

// wantFree is the free memory F the filler keeps on a device of totalMiB:
// what the target leaves free plus the reserve, saturating.
func (p params) wantFree(totalMiB uint64) uint64 {
	f := totalMiB - min(p.targetMiB, totalMiB)
	if f+p.reserveMiB < f {
		return ^uint64(0)
	}
	return f + p.reserveMiB
}

// plan returns how many chunks to allocate (> 0) or release (< 0) given
// the device's free and total memory and the chunks held. Below F it
// releases enough chunks to reach F, as many as it holds; at F plus a
// chunk or more it grows to within a chunk above F; in between it holds.
func plan(p params, freeMiB, totalMiB uint64, held int, chunkMiB uint64) int {
	want := p.wantFree(totalMiB)
	switch {
	case freeMiB < want:
		short := want - freeMiB
		need := short / chunkMiB
		if short%chunkMiB != 0 {
			need++
		}
		return -int(min(need, uint64(held)))
	case freeMiB-want >= chunkMiB:
		return int(min((freeMiB-want)/chunkMiB, 1<<31))
	}
	return 0
}

// HelperTarget turns a target of a GPU's total usage as NVML counts it,
// of gpuTotalMiB, into the helper's terms, of helperTotalMiB, the total its
// backend reports (State.TotalMiB). NVML's total and used include the
// memory the driver reserves for itself; cuMemGetInfo's total leaves it
// out, and both report the same free memory. So the helper keeps free what
// the target leaves free of NVML's total only when it is given the target
// less the difference: on an H200 (driver 580.159.04) NVML's total is
// 143771 MiB and cuMemGetInfo's 143155, and a helper given NVML's target
// held the GPU 616 MiB above it. The helper's own CUDA context needs no
// such care: cuMemGetInfo counts it as used, as NVML does. An unknown
// helper total (0) leaves the target as it is.
func HelperTarget(targetMiB, gpuTotalMiB, helperTotalMiB uint64) uint64 {
	if helperTotalMiB == 0 || helperTotalMiB >= gpuTotalMiB {
		return targetMiB
	}
	hidden := gpuTotalMiB - helperTotalMiB
	return targetMiB - min(hidden, targetMiB)
}
