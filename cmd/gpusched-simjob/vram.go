package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// envVisible lists the GPUs a job may use, as the daemon sets it.
const envVisible = "CUDA_VISIBLE_DEVICES"

// vram is the job's simulated GPU memory on its visible GPUs.
type vram struct {
	reg   *simgpu.Registry
	pid   int // host pid
	start uint64
	devs  []simgpu.Device // in CUDA ordinal order
	got   []uint64        // MiB held on each device, by position in devs
	held  uint64          // MiB held on every device
	// limits are the MPS memory limits by device uuid, registered before
	// the first allocation and again after each release.
	limits  map[string]uint64
	limited bool
	// util is how busy it keeps its GPUs, registered before the first
	// allocation and again after each release.
	util    int
	utilSet bool
}

// openVRAM finds the sim directory and the visible GPUs from the environment.
func openVRAM(pid int, start uint64) (*vram, error) {
	dir, okDir := os.LookupEnv(simgpu.EnvDir)
	list, okList := os.LookupEnv(envVisible)
	if !okDir || dir == "" || !okList {
		return nil, fmt.Errorf("--vram needs %s (the daemon's sim directory) and %s (the GPUs to use)", simgpu.EnvDir, envVisible)
	}
	reg, err := simgpu.Open(dir)
	if err != nil {
		return nil, err
	}
	devs, err := reg.Visible(list)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: %w", envVisible, list, err)
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%s=%q names no GPU", envVisible, list)
	}
	return &vram{reg: reg, pid: pid, start: start, devs: devs, got: make([]uint64, len(devs))}, nil
}

// uuids returns the visible GPUs' UUIDs, comma-separated.
func (v *vram) uuids() string {
	ids := make([]string, len(v.devs))
	for i, d := range v.devs {
		ids[i] = d.UUID
	}
	return strings.Join(ids, ",")
}

// oomError is a simulated CUDA out-of-memory failure; its message is the one
// PyTorch prints. It matches simgpu.ErrOutOfMemory with errors.Is.
type oomError struct {
	ordinal int // CUDA device ordinal: position in CUDA_VISIBLE_DEVICES
	err     *simgpu.OutOfMemoryError
}

func (e *oomError) Error() string {
	if e.err.LimitMiB > 0 {
		return fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %d MiB. "+
			"GPU %d has a total capacity of %d MiB of which %d MiB is free under this process's MPS memory limit of %d MiB. (simulated on %s)",
			e.err.RequestedMiB, e.ordinal, e.err.Device.TotalMiB, e.err.FreeMiB, e.err.LimitMiB, e.err.Device.UUID)
	}
	return fmt.Sprintf("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %d MiB. "+
		"GPU %d has a total capacity of %d MiB of which %d MiB is free. (simulated on %s)",
		e.err.RequestedMiB, e.ordinal, e.err.Device.TotalMiB, e.err.FreeMiB, e.err.Device.UUID)
}

func (e *oomError) Unwrap() error { return e.err }

// grow allocates up to total MiB on every visible GPU; an *oomError says
// which device had no room. While the process is locked for a checkpoint it
// fails with simgpu.ErrLocked, and a later call resumes where it stopped.
func (v *vram) grow(total uint64) error {
	v.follow()
	if err := v.applyLimits(); err != nil {
		return err
	}
	if err := v.applyUtil(); err != nil {
		return err
	}
	for i, d := range v.devs {
		if v.got[i] >= total {
			continue
		}
		err := v.reg.Allocate(v.pid, v.start, d.UUID, total-v.got[i])
		var oom *simgpu.OutOfMemoryError
		if errors.As(err, &oom) {
			return &oomError{ordinal: i, err: oom}
		}
		if err != nil {
			return err
		}
		v.got[i] = total
	}
	v.held = total
	return nil
}

// release frees all the job's simulated memory.
func (v *vram) release() error {
	v.follow()
	v.limited, v.utilSet = false, false
	return v.reg.Release(v.pid)
}

// follow takes on a new host pid after a CRIU restore (which keeps only the
// namespace pid): the registry knows the process by its host pid, as NVML
// does.
func (v *vram) follow() {
	pid, err := procfs.SelfPID()
	if err != nil || pid == v.pid {
		return
	}
	if start, err := procfs.StartTime(pid); err == nil {
		v.pid, v.start = pid, start
	}
}
