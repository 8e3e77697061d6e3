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

// underWatch runs fn with ctx, ended once a process of rec's tree is in a
// frozen cgroup, where the tree is in its owner's cgroup: the owner may
// move it into a cgroup they made and freeze it, and the checkpoint driver
// waits on a frozen process (checkpoint-restore/criu#2458) for as long as
// its deadline lets it. A failure the watch caused says so.
func underWatch(ctx context.Context, rec proctable.Record, fn func(ctx context.Context) error) error {
	if rec.Cgroup == "" {
		return fn(ctx)
	}
	wctx, stop := unlessFrozen(ctx, treeFrozen(rec.InitPID))
	defer stop()
	err := fn(wctx)
	if err != nil && wctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w (%v)", context.Cause(wctx), err)
	}
	return err
}
