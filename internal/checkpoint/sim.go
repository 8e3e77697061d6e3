package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpusched/gpusched/internal/simgpu"
)

// SimOptions shapes the simulated driver's timing.
type SimOptions struct {
	// CheckpointPerGiB and RestorePerGiB are slept per GiB moved, as the
	// host link would take (0: no delay). The sleep follows the move and
	// ends early, with ErrTimeout, when ctx does.
	CheckpointPerGiB time.Duration
	RestorePerGiB    time.Duration
	// LockWait bounds the wait for a user's simulated GPU lock (0: none):
	// past it a call fails, naming the user.
	LockWait time.Duration
}

// Sim is the in-process driver of the daemon's --sim mode: the same state
// machine the fake cuda-checkpoint drives, on the simgpu registry.
type Sim struct {
	reg  *simgpu.Registry
	opts SimOptions
}

var _ Driver = (*Sim)(nil)

// NewSim opens the sim directory dir.
func NewSim(dir string, opts SimOptions) (*Sim, error) {
	reg, err := simgpu.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("simulated cuda checkpoint: %w", err)
	}
	reg.SetLockWait(opts.LockWait)
	return &Sim{reg: reg, opts: opts}, nil
}

// Caps reports everything supported.
func (s *Sim) Caps() Caps { return Caps{Kind: "sim", DeviceMap: true, RestoreTID: true} }

// State returns the process's simulated CUDA state.
func (s *Sim) State(ctx context.Context, pid int) (State, error) {
	if err := ctxError(ctx, "get-state", pid); err != nil {
		return "", err
	}
	st, err := s.reg.CheckpointStateContext(ctx, pid)
	if err != nil {
		return "", simError("get-state", pid, err)
	}
	return State(st), nil
}

// Lock locks at once (a simulated process has no CUDA call in flight),
// unless the simulated driver makes it wait for an NCCL peer: then at most
// timeout (0: until ctx ends).
func (s *Sim) Lock(ctx context.Context, pid int, timeout time.Duration) error {
	if err := ctxError(ctx, "lock", pid); err != nil {
		return err
	}
	return simError("lock", pid, s.reg.LockProcessContext(ctx, pid, timeout))
}

// Checkpoint parks the process's device memory.
func (s *Sim) Checkpoint(ctx context.Context, pid int) error {
	if err := ctxError(ctx, "checkpoint", pid); err != nil {
		return err
	}
	moved, err := s.reg.CheckpointProcessContext(ctx, pid)
	if err != nil {
		return simError("checkpoint", pid, err)
	}
	return s.transfer(ctx, "checkpoint", pid, moved, s.opts.CheckpointPerGiB)
}

// Restore puts the parked memory back, onto the pairs' new GPUs, waiting
// (until ctx ends) while the process's restore thread is stopped.
func (s *Sim) Restore(ctx context.Context, pid int, pairs []GPUPair) error {
	if err := ctxError(ctx, "restore", pid); err != nil {
		return err
	}
	var remap map[string]string
	if len(pairs) > 0 {
		remap = make(map[string]string, len(pairs))
		for _, p := range pairs {
			remap[p.Old] = p.New
		}
	}
	moved, err := s.reg.RestoreProcess(ctx, pid, remap)
	if err != nil {
		return simError("restore", pid, err)
	}
	return s.transfer(ctx, "restore", pid, moved, s.opts.RestorePerGiB)
}

// Unlock lets the process run again.
func (s *Sim) Unlock(ctx context.Context, pid int) error {
	if err := ctxError(ctx, "unlock", pid); err != nil {
		return err
	}
	return simError("unlock", pid, s.reg.UnlockProcessContext(ctx, pid))
}

// RestoreThreadID returns the tid of the process's restore thread.
func (s *Sim) RestoreThreadID(ctx context.Context, pid int) (int, error) {
	if err := ctxError(ctx, "get-restore-tid", pid); err != nil {
		return 0, err
	}
	tid, err := s.reg.RestoreThreadID(pid)
	if err != nil {
		return 0, simError("get-restore-tid", pid, err)
	}
	return tid, nil
}

// Close releases nothing.
func (s *Sim) Close() error { return nil }

// transfer sleeps for moving mib MiB at perGiB, ending early when ctx does.
func (s *Sim) transfer(ctx context.Context, op string, pid int, mib uint64, perGiB time.Duration) error {
	d := time.Duration(float64(perGiB) * float64(mib) / 1024)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return &OpError{Op: op, PID: pid, Err: ctxClass(ctx.Err()),
			Detail: fmt.Sprintf("%v while moving %d MiB (the move itself completed)", ctx.Err(), mib)}
	}
}

// ctxError fails a call whose ctx is already done.
func ctxError(ctx context.Context, op string, pid int) error {
	if err := ctx.Err(); err != nil {
		return &OpError{Op: op, PID: pid, Err: ctxClass(err), Detail: err.Error()}
	}
	return nil
}

// simError classifies a simgpu error; nil stays nil.
func simError(op string, pid int, err error) error {
	if err == nil {
		return nil
	}
	class := ErrFailed
	switch {
	case errors.Is(err, simgpu.ErrNoCUDA), errors.Is(err, simgpu.ErrNoSuchProcess):
		class = ErrNotCUDA
	case errors.Is(err, simgpu.ErrIllegalState):
		class = ErrIllegalState
	case errors.Is(err, simgpu.ErrOutOfMemory):
		class = ErrOutOfMemory
	case errors.Is(err, simgpu.ErrLockHeld), errors.Is(err, simgpu.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		class = ErrTimeout
	}
	return &OpError{Op: op, PID: pid, Err: class, Detail: err.Error()}
}
