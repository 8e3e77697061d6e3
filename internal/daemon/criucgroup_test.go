package daemon

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestUserCgroupHoldsCRIU: the CRIU of a user's own thaw from disk and
// hibernate runs in the cgroup delegated to that user (gpusched-criu), its
// CPU counted there, and the restored tree goes on in its own cgroup
// there; an eviction, the daemon's own dump, runs CRIU in the daemon's
// cgroup, where the user cannot hold it.
func TestUserCgroupHoldsCRIU(t *testing.T) {
	mnt, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gscriu3", "gscriu")
	own := userCgroup(t, top, u, true)
	criu := filepath.Join(own, "gpusched-criu")
	h, ticks := evictableHarness(t, u, func(c *config.Config) { c.UserCgroups = filepath.Join(top, "user-%U") })
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "roots"}); err != nil {
		t.Fatalf("root's freeze, which evicts the user's process: %v", err)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process: %s, want hibernated (evicted)", p.State)
	}
	if _, err := os.Stat(criu); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after an eviction, the user's CRIU cgroup: %v; want none (the daemon's dump runs in its own)", err)
	}

	if _, errOut, code := h.ctlAs(u, "thaw", "theirs"); code != 0 {
		t.Fatalf("thaw theirs from disk: %s", errOut)
	}
	restored := testutil.CgroupCPU(t, criu)
	if restored == 0 {
		t.Fatalf("the restore spent no CPU in %s", criu)
	}
	p := h.proc("theirs")
	if got, want := testutil.CgroupOf(t, p.PID), strings.TrimPrefix(filepath.Join(own, "gpusched-"+p.ID), mnt); got != want {
		t.Errorf("the restored process is in cgroup %s, want %s", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(criu, "cgroup.procs")); err != nil || len(b) != 0 {
		t.Errorf("%s still holds processes after the restore: %q, %v", criu, b, err)
	}
	h.verifyContinued("theirs", ticks)

	if _, errOut, code := h.ctlAs(u, "hibernate", "theirs"); code != 0 {
		t.Fatalf("hibernate theirs: %s", errOut)
	}
	if testutil.CgroupCPU(t, criu) <= restored {
		t.Errorf("the user's hibernate spent no CPU in %s", criu)
	}
}

// TestCRIURunsInTheCallersCgroups: for a user with no delegated cgroup,
// the CRIU of their own hibernate and thaw runs in the cgroups of the
// process that asked, as a log reader does; the tree it restores is moved
// back to the daemon's before it runs. Asked from a cgroup the user froze,
// a thaw from disk or a hibernate fails at once, saying so, and the
// process is kept.
func TestCRIURunsInTheCallersCgroups(t *testing.T) {
	mnt, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gscriu5", "gscriu")
	own := userCgroup(t, top, u, true) // not --user-cgroups: the tree stays in the daemon's cgroups
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gscriu" })
	mine, other := filepath.Join(own, "mine"), filepath.Join(own, "other")
	for _, dir := range []string{mine, other} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.freeze")} {
			if err := os.Chown(f, int(u.UID), int(u.GID)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "16", "--tick", "0.02"); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "tick 3", 1)
	ticks := h.lastTick("theirs")
	daemons := testutil.CgroupOf(t, os.Getpid()) // the daemon runs in this process

	freeze := func(v string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(mine, "cgroup.freeze"), []byte(v), 0); err != nil {
			t.Fatal(err)
		}
	}
	fromFrozen := func(method string) string {
		t.Helper()
		cmd, out, send := frozenPeerAs(t, u, h.cfg.Socket, mine, other, `{"id":1,"method":"`+method+`","params":{"name":"theirs"}}`)
		defer cmd.Process.Kill()
		freeze("1")
		defer freeze("0")
		awaitFrozen(t, mine)
		send()
		return out()
	}

	h.ctlInCgroup(u, mine, "hibernate", "theirs")
	if l := fromFrozen("thaw"); !strings.Contains(l, "cgroup.freeze") {
		t.Fatalf("thaw sent from a frozen cgroup: %.300q; want a failure naming cgroup.freeze", l)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated || p.Snapshot == "" {
		t.Fatalf("the process after the failed thaw: %s, snapshot %q; want hibernated with its snapshot", p.State, p.Snapshot)
	}
	h.ctlInCgroup(u, mine, "thaw", "theirs")
	p := h.proc("theirs")
	for what, pid := range map[string]int{"command": p.PID, "supervisor": p.InitPID} {
		if got := testutil.CgroupOf(t, pid); got != daemons {
			t.Errorf("the restored %s is in cgroup %s, want the daemon's %s (not the caller's %s)", what, got, daemons, strings.TrimPrefix(mine, mnt))
		}
	}
	h.verifyContinued("theirs", ticks)
	if l := fromFrozen("hibernate"); !strings.Contains(l, "cgroup.freeze") {
		t.Fatalf("hibernate sent from a frozen cgroup: %.300q; want a failure naming cgroup.freeze", l)
	}
	if p := h.proc("theirs"); p.State != api.StateFrozen {
		t.Fatalf("the process after the failed hibernate: %s, want frozen (in RAM)", p.State)
	}
}
