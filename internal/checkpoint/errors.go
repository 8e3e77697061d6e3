package checkpoint

import (
	"context"
	"errors"
	"fmt"
)

var (
	// ErrUnsupported means the tool, the driver or the feature is absent.
	ErrUnsupported = errors.New("not supported")
	// ErrNotCUDA means the process has no CUDA state the driver knows of.
	ErrNotCUDA = errors.New("not a CUDA process")
	// ErrIllegalState means the driver refused a transition from the
	// process's current state.
	ErrIllegalState = errors.New("illegal state")
	// ErrTimeout means a lock timed out or a call passed its deadline.
	ErrTimeout = errors.New("timed out")
	// ErrOutOfMemory means a restore found too little GPU memory.
	ErrOutOfMemory = errors.New("out of GPU memory")
	// ErrNotCheckpointable means the process can never be checkpointed,
	// for example an MPS client.
	ErrNotCheckpointable = errors.New("not checkpointable")
	// ErrRejected means the driver refused the call's arguments, such as a
	// device map naming GPUs it cannot restore onto; the process is as it
	// was.
	ErrRejected = errors.New("rejected by the driver")
	// ErrNoSpace means a dump ran out of disk.
	ErrNoSpace = errors.New("no space left on device")
	// ErrFailed is any other driver failure.
	ErrFailed = errors.New("failed")
)

// OpError is a failed driver call: the action, the pid, the class (one of
// the sentinels above) and the driver's own words (a CUresult name, the
// stderr tail of cuda-checkpoint).
type OpError struct {
	Op     string // "lock", "checkpoint", "restore", "unlock", "get-state", "get-restore-tid"
	PID    int
	Err    error
	Detail string
}

func (e *OpError) Error() string {
	msg := fmt.Sprintf("cuda checkpoint %s of pid %d: %v", e.Op, e.PID, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the class sentinel.
func (e *OpError) Unwrap() error { return e.Err }

// ctxClass classifies the end of a call's context: a passed deadline is
// ErrTimeout, a cancellation ErrFailed that also matches context.Canceled.
func ctxClass(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrTimeout
	}
	return fmt.Errorf("%w (%w)", ErrFailed, err)
}
