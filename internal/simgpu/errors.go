package simgpu

import (
	"errors"
	"fmt"
)

var (
	// ErrOutOfMemory means an allocation does not fit in a device's free memory.
	ErrOutOfMemory = errors.New("out of memory")
	// ErrNoSuchDevice means a UUID or index names no simulated device.
	ErrNoSuchDevice = errors.New("no such simulated GPU")
	// ErrNoSuchProcess means a process has no live record, or its start time
	// does not match the running process with that pid.
	ErrNoSuchProcess = errors.New("no such process")
	// ErrNoCUDA means a process is gone or has no simulated GPU record, so
	// there is no CUDA context to checkpoint.
	ErrNoCUDA = errors.New("no CUDA context")
	// ErrIllegalState means a checkpoint transition is not allowed from the
	// process's current CUDA state.
	ErrIllegalState = errors.New("illegal CUDA checkpoint state")
	// ErrLocked means a process's CUDA calls are blocked because it is
	// locked or checkpointed.
	ErrLocked = errors.New("CUDA calls blocked: process is locked")
	// ErrNoUserDir means a user has no record directory yet: the daemon
	// makes one when it starts a process for that user.
	ErrNoUserDir = errors.New("no simulated GPU directory for this user (the daemon makes one when it starts a process for the user)")
	// ErrTimeout means a CUDA lock waited past its timeout (see
	// LockProcessContext).
	ErrTimeout = errors.New("CUDA lock timed out")
	// ErrLockHeld means a user's lock stayed held past the Registry's wait
	// limit (SetLockWait).
	ErrLockHeld = errors.New("simulated GPU lock held")
	// ErrBadDeviceMap means a restore's device map leaves out a GPU the
	// process was checkpointed on, or maps one onto a GPU of another chip
	// type: the driver answers CUDA_ERROR_INVALID_VALUE ("invalid argument").
	ErrBadDeviceMap = errors.New("invalid device map")
	// ErrRestoreBroken means an earlier restore of the process ran out of
	// GPU memory, after which the driver fails every restore with
	// CUDA_ERROR_OPERATING_SYSTEM (NVIDIA/cuda-checkpoint#44).
	ErrRestoreBroken = errors.New("OS call failed or operation not supported on this OS (an earlier restore ran out of memory)")
	// ErrNoRestoreThread means the process has no live CUDA restore thread
	// to carry out a restore.
	ErrNoRestoreThread = errors.New("no CUDA restore thread")
	// ErrRestoreThreadStopped means a restore waited for the process's
	// CUDA restore thread, which stayed stopped, until its context ended.
	ErrRestoreThreadStopped = errors.New("CUDA restore thread is stopped")
)

// OutOfMemoryError reports a failed allocation with the numbers a job needs to
// print a CUDA-style message. It matches ErrOutOfMemory with errors.Is.
// LimitMiB is set when the process's own limit on the device (an MPS
// pinned device memory limit) refused the allocation; FreeMiB is then what
// is left under it.
type OutOfMemoryError struct {
	Device       Device
	RequestedMiB uint64
	FreeMiB      uint64
	LimitMiB     uint64
}

func (e *OutOfMemoryError) Error() string {
	if e.LimitMiB > 0 {
		return fmt.Sprintf("simulated GPU %d (%s): %v: tried to allocate %d MiB, %d MiB free under the process's MPS memory limit of %d MiB",
			e.Device.Index, e.Device.UUID, ErrOutOfMemory, e.RequestedMiB, e.FreeMiB, e.LimitMiB)
	}
	return fmt.Sprintf("simulated GPU %d (%s): %v: tried to allocate %d MiB, %d MiB free of %d MiB",
		e.Device.Index, e.Device.UUID, ErrOutOfMemory, e.RequestedMiB, e.FreeMiB, e.Device.TotalMiB)
}

// Unwrap returns ErrOutOfMemory.
func (e *OutOfMemoryError) Unwrap() error { return ErrOutOfMemory }
