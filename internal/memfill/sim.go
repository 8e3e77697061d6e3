package memfill

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/simgpu"
)

// simBackend holds simulated VRAM in a simgpu registry, registered under
// the helper's host pid and start time as a simulated job is, with its
// CUDA context's cost on the device (simgpu.Device.ContextMiB) on top of
// its chunks, as NVML reports a real helper's usage.
type simBackend struct {
	reg      *simgpu.Registry
	pid      int
	start    uint64
	uuid     string
	chunkMiB uint64
}

// openSim opens the sim directory dir for device uuid.
func openSim(dir, uuid string, chunkMiB uint64, pid int, start uint64) (*simBackend, error) {
	reg, err := simgpu.Open(dir)
	if err != nil {
		return nil, err
	}
	devs, err := reg.Visible(uuid)
	if err != nil {
		return nil, err
	}
	if len(devs) != 1 {
		return nil, fmt.Errorf("--gpu %q names no simulated GPU", uuid)
	}
	// The context, as cuDevicePrimaryCtxRetain allocates it on a real GPU.
	if n := devs[0].ContextMiB; n > 0 {
		if err := reg.Allocate(pid, start, devs[0].UUID, n); err != nil {
			return nil, fmt.Errorf("create the CUDA context: %w", err)
		}
	}
	return &simBackend{reg: reg, pid: pid, start: start, uuid: devs[0].UUID, chunkMiB: chunkMiB}, nil
}

func (s *simBackend) Alloc() (handle, error) {
	return 0, s.reg.Allocate(s.pid, s.start, s.uuid, s.chunkMiB)
}

func (s *simBackend) FreeChunk(handle) error {
	return s.reg.Free(s.pid, s.start, s.uuid, s.chunkMiB)
}

// Free reports what cuMemGetInfo would: the free memory NVML reports too,
// of a total without the driver's reserve (simgpu.Device.ReservedMiB).
func (s *simBackend) Free() (freeMiB, totalMiB uint64, err error) {
	snap, err := s.reg.Snapshot()
	if err != nil {
		return 0, 0, err
	}
	for _, d := range snap.Devices {
		if d.UUID == s.uuid {
			return d.TotalMiB - min(d.UsedMiB, d.TotalMiB), d.CUDATotalMiB(), nil
		}
	}
	return 0, 0, fmt.Errorf("simulated GPU %s: %w", s.uuid, simgpu.ErrNoSuchDevice)
}

// Close removes the helper's record, freeing what it still holds.
func (s *simBackend) Close() { _ = s.reg.Release(s.pid) }
