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
