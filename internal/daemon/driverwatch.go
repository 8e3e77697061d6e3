package daemon

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// frozenPoll is how often CRIU's or the checkpoint driver's work on a
// tree looks whether the tree's owner has frozen or stopped any of it.
const frozenPoll = 250 * time.Millisecond

// unlessFrozen is ctx, ended once frozen names a frozen cgroup. A user
// may freeze a cgroup they made in the one delegated to them
// (cgroup.freeze), having moved their tree's processes into it, or one
// CRIU runs in; CRIU and the checkpoint driver then wait on the frozen
// tree, or CRIU is frozen itself, until their deadline (ten minutes for
// CRIU): an eviction of that user's process would hold another user's
// freeze for as long, and a ttl policy's hibernate every user's policies.
func unlessFrozen(ctx context.Context, frozen func() string) (context.Context, context.CancelFunc) {
	return unlessBlocked(ctx, func() error { return frozenError(frozen()) })
}

// unlessBlocked is ctx, ended with blocked's error once it reports one,
// looked at every frozenPoll.
func unlessBlocked(ctx context.Context, blocked func() error) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		tick := time.NewTicker(frozenPoll)
		defer tick.Stop()
		for {
			if err := blocked(); err != nil {
				cancel(err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// frozenError says that cgroup dir is frozen; nil for "".
func frozenError(dir string) error {
	if dir == "" {
		return nil
	}
	return fmt.Errorf("cgroup %s is frozen (cgroup.freeze): thaw it first", dir)
}

// treeFrozen names a frozen cgroup one of the processes of the tree
// rooted at initPID is in, or "".
func treeFrozen(initPID int) func() string {
	return func() string {
		pids, _ := procfs.TreeOf(initPID)
		for _, pid := range pids {
			if dir := cgroup.FrozenOf(pid); dir != "" {
				return dir
			}
		}
		return ""
	}
}

// refuseFrozen fails op on rec at once, before any driver call, where the
// tree is in its owner's cgroup and one of its processes is in a frozen
// cgroup: the real driver answers no call on a frozen process, its state
// query included (docs/hardware.md, "Supported process kinds"), and a call
// given up on may still land once the cgroup is thawed.
func refuseFrozen(op string, rec proctable.Record) error {
	if rec.Cgroup == "" {
		return nil
	}
	if err := frozenError(treeFrozen(rec.InitPID)()); err != nil {
		return conflictf("%s %q: %v", op, rec.Name, err)
	}
	return nil
}

// refuseStopped fails op on rec at once where one of procs, the CUDA
// processes of its tree, is stopped: the real driver answers no call on a
// stopped process, not even within the lock's own timeout, until it is
// continued (docs/hardware.md), so the operation would wait out its
// deadline. The daemon continues what it stopped itself before its driver
// calls.
func refuseStopped(op string, rec proctable.Record, procs []proctable.CheckpointProc) error {
	for _, p := range procs {
		if err := stoppedError(p.PID, p.Start); err != nil {
			return conflictf("%s %q: %v", op, rec.Name, err)
		}
	}
	return nil
}

// stoppedError says that CUDA process pid (started at start) is stopped
// (SIGSTOP, which its owner may send, or a debugger's stop); nil if not.
func stoppedError(pid int, start uint64) error {
	st, err := procfs.ReadStat(pid)
	if err != nil || st.StartTime != start || st.State != 'T' && st.State != 't' {
		return nil
	}
	return fmt.Errorf("its CUDA process %d is stopped (SIGSTOP or a debugger), and the driver answers nothing for it: continue it first (kill -CONT %d)", pid, pid)
}

// driverReach is what the watch of one freeze or thaw reads while it runs:
// the CUDA processes the operation calls the driver on, and whether the
// daemon holds the tree stopped itself. Stops are counted in and out (odd:
// stopped by the daemon), a sequence lock, so that a look at /proc that a
// stop or continue overlapped is not trusted.
type driverReach struct {
	procs atomic.Pointer[[]proctable.CheckpointProc]
	stops atomic.Uint64
}

// track records the operation's CUDA processes.
func (r *driverReach) track(procs []proctable.CheckpointProc) {
	own := slices.Clone(procs)
	r.procs.Store(&own)
}

// daemonStops marks the daemon's own stop of the tree begun (true) or
// ended (false).
func (r *driverReach) daemonStops(on bool) {
	if (r.stops.Load()%2 == 1) != on {
		r.stops.Add(1)
	}
}

// stopped is the error of a CUDA process stopped by someone other than
// the daemon, or nil.
func (r *driverReach) stopped() error {
	before := r.stops.Load()
	if before%2 == 1 {
		return nil
	}
	var found error
	if procs := r.procs.Load(); procs != nil {
		for _, p := range *procs {
			if found = stoppedError(p.PID, p.Start); found != nil {
				break
			}
		}
	}
	if r.stops.Load() != before {
		return nil
	}
	return found
}

// watchTree is ctx for every driver call of one freeze or thaw of rec,
// ended once a CUDA process of op is stopped by someone other than the
// daemon, or, where the tree is in its owner's cgroup, once a process of
// it is in a frozen cgroup: the owner may stop their process, or move the
// tree into a cgroup they made and freeze it, while the operation runs,
// and each call would wait on it (checkpoint-restore/criu#2458) for as
// long as its deadline lets it, the rollback's too. explain says so of an
// error the watch caused; stop ends the watch.
func watchTree(ctx context.Context, rec proctable.Record, op *cudaOp) (wctx context.Context, stop func(), explain func(error) error) {
	frozen := func() string { return "" }
	if rec.Cgroup != "" {
		frozen = treeFrozen(rec.InitPID)
	}
	wctx, stop = unlessBlocked(ctx, func() error {
		if err := op.reach.stopped(); err != nil {
			return err
		}
		return frozenError(frozen())
	})
	return wctx, stop, func(err error) error {
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (%v)", context.Cause(wctx), err)
		}
		return err
	}
}
