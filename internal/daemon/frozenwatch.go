package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// frozenPoll is how often CRIU's or the checkpoint driver's work on a
// tree in its owner's cgroup looks whether the owner has frozen any of it.
const frozenPoll = 250 * time.Millisecond

// unlessFrozen is ctx, ended once frozen names a frozen cgroup. A user
// may freeze a cgroup they made in the one delegated to them
// (cgroup.freeze), having moved their tree's processes into it, or one
// CRIU runs in; CRIU and the checkpoint driver then wait on the frozen
// tree, or CRIU is frozen itself, until their deadline (ten minutes for
// CRIU): an eviction of that user's process would hold another user's
// freeze for as long, and a ttl policy's hibernate every user's policies.
func unlessFrozen(ctx context.Context, frozen func() string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		tick := time.NewTicker(frozenPoll)
		defer tick.Stop()
		for {
			if dir := frozen(); dir != "" {
				cancel(fmt.Errorf("cgroup %s is frozen (cgroup.freeze): thaw it first", dir))
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
	if dir := treeFrozen(rec.InitPID)(); dir != "" {
		return conflictf("%s %q: cgroup %s is frozen (cgroup.freeze): thaw it first", op, rec.Name, dir)
	}
	return nil
}

// refuseStopped fails op on rec at once where one of procs, the CUDA
// processes of its tree, is stopped (SIGSTOP, or under a debugger): the
// real driver answers no call on a stopped process, not even within the
// lock's own timeout, until it is continued (docs/hardware.md), so the
// operation would wait out its deadline. The daemon continues what it
// stopped itself before its driver calls.
func refuseStopped(op string, rec proctable.Record, procs []proctable.CheckpointProc) error {
	for _, p := range procs {
		if st, err := procfs.ReadStat(p.PID); err == nil && st.StartTime == p.Start && (st.State == 'T' || st.State == 't') {
			return conflictf("%s %q: its CUDA process %d is stopped (SIGSTOP or a debugger), and the driver answers nothing for it: continue it first (kill -CONT %d)", op, rec.Name, p.PID, p.PID)
		}
	}
	return nil
}

// watchTree is ctx for every driver call of one freeze or thaw of rec,
// ended once a process of rec's tree is in a frozen cgroup, where the tree
// is in its owner's cgroup: the owner may move it into a cgroup they made
// and freeze it while the operation runs, and each call would wait on the
// frozen process (checkpoint-restore/criu#2458) for as long as its
// deadline lets it, the rollback's too. explain says so of an error the
// watch caused; stop ends the watch.
func watchTree(ctx context.Context, rec proctable.Record) (wctx context.Context, stop func(), explain func(error) error) {
	if rec.Cgroup == "" {
		return ctx, func() {}, func(err error) error { return err }
	}
	wctx, stop = unlessFrozen(ctx, treeFrozen(rec.InitPID))
	return wctx, stop, func(err error) error {
		if err != nil && wctx.Err() != nil && ctx.Err() == nil {
			err = fmt.Errorf("%w (%v)", context.Cause(wctx), err)
		}
		return err
	}
}
