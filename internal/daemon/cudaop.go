package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// cudaOp is one freeze or thaw of a tree's CUDA processes: the processes,
// the driver state the daemon believes each is in, and phase timings. Each
// phase acts on every process in the phase's starting state, in parallel;
// after a failure, query asks the driver what really happened.
type cudaOp struct {
	drv     cudaDriver
	timeout time.Duration // deadline of each call but lock
	procs   []proctable.CheckpointProc
	states  map[int]checkpoint.State
	ms      map[string]float64
	reach   driverReach // what the operation's watch reads
}

func (d *Daemon) newCudaOp(procs []proctable.CheckpointProc, assumed checkpoint.State) *cudaOp {
	op := &cudaOp{drv: d.driver, timeout: d.cfg.CheckpointTimeout, procs: procs,
		states: map[int]checkpoint.State{}, ms: map[string]float64{}}
	for _, p := range procs {
		op.states[p.PID] = assumed
	}
	op.reach.track(op.procs)
	return op
}

// add takes on procs, running as far as the daemon knows: CUDA processes
// found after the operation began.
func (op *cudaOp) add(procs []proctable.CheckpointProc) {
	for _, p := range procs {
		op.procs = append(op.procs, p)
		op.states[p.PID] = checkpoint.StateRunning
	}
	op.reach.track(op.procs)
}

// step runs act on every process in state from, in parallel, each under
// its own deadline; those that succeed move to state to.
func (op *cudaOp) step(ctx context.Context, phase string, from, to checkpoint.State, deadline time.Duration,
	act func(ctx context.Context, pid int) error) error {
	start := time.Now()
	defer func() { op.ms[phase] += msSince(start) }()
	var todo []int
	for _, p := range op.procs {
		if op.states[p.PID] == from {
			todo = append(todo, p.PID)
		}
	}
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for i, pid := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			errs[i] = act(cctx, pid)
		}()
	}
	wg.Wait()
	for i, pid := range todo {
		if errs[i] == nil {
			op.states[pid] = to
		}
	}
	return joinErrors(errs)
}

func (op *cudaOp) lock(ctx context.Context, timeout time.Duration) error {
	return op.step(ctx, "lock", checkpoint.StateRunning, checkpoint.StateLocked, timeout+op.timeout,
		func(ctx context.Context, pid int) error { return op.drv.Lock(ctx, pid, timeout) })
}

// freeze locks and checkpoints every running process of op, and fails
// unless all of them end checkpointed.
func (op *cudaOp) freeze(ctx context.Context, lockTimeout time.Duration) error {
	if err := op.lock(ctx, lockTimeout); err != nil {
		return err
	}
	if err := op.checkpoint(ctx); err != nil {
		return err
	}
	return op.expect(api.StateFrozen)
}

func (op *cudaOp) checkpoint(ctx context.Context) error {
	return op.step(ctx, "checkpoint", checkpoint.StateLocked, checkpoint.StateCheckpointed, op.timeout, op.drv.Checkpoint)
}

func (op *cudaOp) restore(ctx context.Context, pairs []checkpoint.GPUPair) error {
	return op.step(ctx, "restore", checkpoint.StateCheckpointed, checkpoint.StateLocked, op.timeout,
		func(ctx context.Context, pid int) error { return op.drv.Restore(ctx, pid, pairs) })
}

func (op *cudaOp) unlock(ctx context.Context) error {
	return op.step(ctx, "unlock", checkpoint.StateLocked, checkpoint.StateRunning, op.timeout, op.drv.Unlock)
}

// query replaces what the daemon believes with what the driver reports.
// Processes that exited are dropped; a state the driver cannot report is
// left empty (unknown).
func (op *cudaOp) query(ctx context.Context) {
	op.procs = liveProcs(op.procs)
	op.reach.track(op.procs)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range op.procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, op.timeout)
			defer cancel()
			st, err := op.drv.State(cctx, p.PID)
			if err != nil {
				st = ""
			}
			mu.Lock()
			op.states[p.PID] = st
			mu.Unlock()
		}()
	}
	wg.Wait()
}

// rollback brings every process back to running as far as the driver
// allows, then asks it where each one ended.
func (op *cudaOp) rollback(ctx context.Context) {
	op.query(ctx)
	_ = op.restore(ctx, nil)
	_ = op.unlock(ctx)
	op.query(ctx)
}

// refreeze checkpoints again what a failed restore left locked.
func (op *cudaOp) refreeze(ctx context.Context) {
	op.query(ctx)
	_ = op.checkpoint(ctx)
	op.query(ctx)
}

// verdict is the table state the driver states add up to: running or
// frozen when every process agrees, failed when the driver says so of any,
// locked (a retry resumes) otherwise.
func (op *cudaOp) verdict(empty api.State) api.State {
	if len(op.procs) == 0 {
		return empty
	}
	count := map[checkpoint.State]int{}
	for _, p := range op.procs {
		count[op.states[p.PID]]++
	}
	switch n := len(op.procs); {
	case count[checkpoint.StateFailed] > 0:
		return api.StateFailed
	case count[checkpoint.StateRunning] == n:
		return api.StateRunning
	case count[checkpoint.StateCheckpointed] == n:
		return api.StateFrozen
	}
	return api.StateLocked
}

// expect fails unless the states the daemon believes in add up to want:
// a process a resumed operation found failed was skipped by every phase.
func (op *cudaOp) expect(want api.State) error {
	if got := op.verdict(want); got != want {
		return fmt.Errorf("%w: the driver reports a CUDA process of the tree %s", checkpoint.ErrIllegalState, got)
	}
	return nil
}

// joinedError is several per-process failures, one line.
type joinedError []error

func (e joinedError) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e joinedError) Unwrap() []error { return e }

// joinErrors drops nils; nil when none is left, the error itself when one is.
func joinErrors(errs []error) error {
	var out joinedError
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
