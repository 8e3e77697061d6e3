package daemon

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamFrozenCgroupHoldsUpNoOne: a user may make a cgroup in the
// one delegated to them, move their tree's processes into it and freeze
// it, and CRIU then waited on the frozen tree until --criu-timeout (ten
// minutes): root's freeze, which had to evict that user's frozen process,
// waited as long. Now a dump of a tree with a process in a frozen cgroup
// stops at once: root's freeze is answered (no room), the user's own
// hibernate fails saying why, and nothing is lost. The same for a restore
// whose CRIU cgroup the user made and froze. Thawed, all goes through.
func TestRedTeamFrozenCgroupHoldsUpNoOne(t *testing.T) {
	_, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gscriu4", "gscriu")
	own := userCgroup(t, top, u, true)
	h, ticks := evictableHarness(t, u, func(c *config.Config) { c.UserCgroups = filepath.Join(top, "user-%U") })
	mine, criu := filepath.Join(own, "mine"), filepath.Join(own, "gpusched-criu")
	shAs(t, u, "mkdir "+mine+" "+criu)
	t.Cleanup(func() { shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze; echo 0 > "+criu+"/cgroup.freeze") })
	pids, err := procfs.TreeOf(h.proc("theirs").InitPID)
	if err != nil || len(pids) < 2 {
		t.Fatalf("the user's tree: %v, %v", pids, err)
	}
	for _, pid := range pids {
		shAs(t, u, "echo "+strconv.Itoa(pid)+" > "+mine+"/cgroup.procs")
	}
	shAs(t, u, "echo 1 > "+mine+"/cgroup.freeze")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = h.client().Freeze(ctx, api.FreezeParams{Name: "roots"})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("root's freeze, with the only process it could evict in a frozen cgroup: %v; want an answer that there is no room", err)
	}
	if p := h.proc("theirs"); p.State != api.StateFrozen || !strings.Contains(p.Error, "cgroup.freeze") {
		t.Fatalf("the user's process after a failed eviction: %s (%q), want frozen, saying a cgroup is", p.State, p.Error)
	}
	if _, errOut, code := h.ctlAs(u, "hibernate", "theirs"); code == 0 || !strings.Contains(errOut, "cgroup.freeze") {
		t.Fatalf("the user's hibernate of a tree in a frozen cgroup: exit %d, %q; want a failure naming cgroup.freeze", code, errOut)
	}
	shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze")
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "roots"}); err != nil {
		t.Fatalf("root's freeze once the user's cgroup is thawed: %v", err)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process: %s, want hibernated (evicted)", p.State)
	}

	shAs(t, u, "echo 1 > "+criu+"/cgroup.freeze")
	if _, errOut, code := h.ctlAs(u, "thaw", "theirs"); code == 0 || !strings.Contains(errOut, "cgroup.freeze") {
		t.Fatalf("the user's thaw from disk with CRIU's cgroup frozen: exit %d, %q; want a failure naming cgroup.freeze", code, errOut)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated || p.Snapshot == "" {
		t.Fatalf("the user's process after a failed restore: %s, snapshot %q; want hibernated with its snapshot", p.State, p.Snapshot)
	}
	shAs(t, u, "echo 0 > "+criu+"/cgroup.freeze")
	if _, errOut, code := h.ctlAs(u, "thaw", "theirs"); code != 0 {
		t.Fatalf("the user's thaw once their cgroup is thawed: %s", errOut)
	}
	h.verifyContinued("theirs", ticks)
}

// shAs runs a shell script as u; it must succeed.
func shAs(t *testing.T, u testutil.User, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %q: %v %s", u.Name, script, err, out)
	}
}

// treeInCgroupOfTheirs makes the cgroup "mine" in own, the cgroup
// delegated to user u, and moves the processes of name's tree into it, as
// u may; the end of t thaws it.
func treeInCgroupOfTheirs(t *testing.T, h *ckptHarness, u testutil.User, own, name string) (mine string) {
	t.Helper()
	mine = filepath.Join(own, "mine")
	shAs(t, u, "mkdir "+mine)
	t.Cleanup(func() { shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze") })
	pids, err := procfs.TreeOf(h.proc(name).InitPID)
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		shAs(t, u, "echo "+strconv.Itoa(pid)+" > "+mine+"/cgroup.procs")
	}
	return mine
}

// TestRedTeamFrozenTreeFailsFreezeAndThawAtOnce: the checkpoint driver
// waits on a process whose cgroup is frozen (the real cuda-checkpoint
// hangs on it, criu#2458 and #2470; the simulated driver's lock and
// restore wait so too), for up to --lock-timeout or --checkpoint-timeout.
// A thaw, then a freeze, of a user's tree that they moved into a cgroup of
// theirs and froze now fail at once, saying so, and the process is kept:
// thawed, everything goes through and the tree runs on.
func TestRedTeamFrozenTreeFailsFreezeAndThawAtOnce(t *testing.T) {
	_, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gscriu6", "gscriu")
	own := userCgroup(t, top, u, true)
	h := newDiskHarness(t, config.DriverSim, longDriverDeadlines, func(c *config.Config) { c.Group, c.UserCgroups = "gscriu", filepath.Join(top, "user-%U") })
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "1", "--tick", "0.02"); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "tick 3", 1)
	if _, errOut, code := h.ctlAs(u, "freeze", "theirs"); code != 0 {
		t.Fatalf("freeze theirs: %s", errOut)
	}
	mine := treeInCgroupOfTheirs(t, h, u, own, "theirs")
	attempt := func(what string, call func(ctx context.Context) error, keep api.State) {
		t.Helper()
		shAs(t, u, "echo 1 > "+mine+"/cgroup.freeze")
		awaitFrozen(t, mine)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := call(ctx); err == nil || !strings.Contains(err.Error(), "cgroup.freeze") {
			t.Fatalf("root's %s of a tree in a frozen cgroup: %v; want a failure naming cgroup.freeze", what, err)
		}
		shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze")
		if p := h.proc("theirs"); p.State != keep {
			t.Fatalf("the process after the failed %s: %s (%s), want %s", what, p.State, p.Error, keep)
		}
	}
	attempt("thaw", func(ctx context.Context) error {
		_, err := h.client().Thaw(ctx, api.ThawParams{Name: "theirs"})
		return err
	}, api.StateFrozen)
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "theirs"}); err != nil {
		t.Fatalf("root's thaw once the cgroup is thawed: %v", err)
	}
	attempt("freeze", func(ctx context.Context) error {
		_, err := h.client().Freeze(ctx, api.FreezeParams{Name: "theirs"})
		return err
	}, api.StateRunning)
	ticks := h.lastTick("theirs")
	h.followCount("theirs", "tick "+strconv.Itoa(ticks+2), 1)
}
