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
