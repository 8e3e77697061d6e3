package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamStuckTreeHoldsUpNoOne: a user's frozen tree with a process
// waiting in the kernel on a file system of theirs that never answers
// (testutil.StallDir, standing in for their own FUSE server) cannot be
// seized by CRIU, which waited out its own timeout (10 s) at every
// eviction of it: root's freeze that needed its room waited as long each
// time. Now the daemon's own dump is not started on such a tree: root's
// freeze is answered (no room), the user's process is kept frozen, saying
// why (without the code: CRIU's "Unseizable non-zombie"). Once the file
// system answers, the eviction goes through and the process thaws.
func TestRedTeamStuckTreeHoldsUpNoOne(t *testing.T) {
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	u := testutil.NewUser(t, "gscriu9", "gscriu")
	mnt, release := testutil.StallDir(t)
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.RAMBudgetMiB, c.Limits.RAMFraction = "gscriu", 300, 1 })
	t.Cleanup(release) // first: the stalled lookup returns, and the tree can end
	script := fmt.Sprintf("cat %s/stall/x & exec %s --vram 256 --host-mem 1 --tick 0.02", mnt, h.bins.SimJob)
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--dir", "/", "--", "sh", "-c", script); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "tick 3", 1)
	if _, errOut, code := h.ctlAs(u, "freeze", "theirs"); code != 0 {
		t.Fatalf("freeze theirs: %s", errOut)
	}
	ticks := h.lastTick("theirs")
	h.memJob("roots", 256, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := h.client().Freeze(ctx, api.FreezeParams{Name: "roots"}); err == nil || ctx.Err() != nil {
		t.Fatalf("root's freeze, with the only process it could evict stuck in the kernel: %v; want an answer that there is no room", err)
	}
	if p := h.proc("theirs"); p.State != api.StateFrozen || !strings.Contains(p.Error, "uninterruptible wait") {
		t.Fatalf("the user's process after a failed eviction: %s (%q), want frozen, saying a thread is stuck", p.State, p.Error)
	}
	release()
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "roots"}); err != nil {
		t.Fatalf("root's freeze once the file system answers: %v", err)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process: %s, want hibernated (evicted)", p.State)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "roots"}); err != nil {
		t.Fatal(err)
	}
	h.waitExit("roots")
	if _, errOut, code := h.ctlAs(u, "thaw", "theirs"); code != 0 {
		t.Fatalf("the user's thaw: %s", errOut)
	}
	h.verifyContinued("theirs", ticks)
}
