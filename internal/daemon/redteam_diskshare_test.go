package daemon

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamDiskShare: a user's snapshots may take --user-disk-fraction of
// the snapshot disk. Before, with --disk-budget unset (the default), a
// user's hibernated processes could fill the snapshot directory's
// filesystem, root's, a tree's memory at a time; with one set, take all of
// it from the others. The user's second hibernate past their share is
// refused, naming the setting, and the process stays as it was; root's
// goes on.
func TestRedTeamDiskShare(t *testing.T) {
	u := testutil.NewUser(t, "gsdisk1", "gsdisk")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group = "gsdisk"
		c.DiskBudgetMiB, c.Limits.DiskFraction = 1024, 0.15 // 153 MiB of it a user's
	})
	start := func(name string, hostMiB string) {
		t.Helper()
		if _, errOut, code := h.ctlAs(u, "run", name, "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", hostMiB, "--tick", "0.02"); code != 0 {
			t.Fatalf("run %s: %s", name, errOut)
		}
		h.followCount(name, "tick 3", 1)
	}
	start("first", "64")
	if _, errOut, code := h.ctlAs(u, "hibernate", "first"); code != 0 {
		t.Fatalf("the user's first hibernate, within their share: %s", errOut)
	}
	start("second", "96")
	ticks := h.lastTick("second")
	_, errOut, code := h.ctlAs(u, "hibernate", "second")
	if code == 0 || !strings.Contains(errOut, "--user-disk-fraction") {
		t.Fatalf("the user's hibernate past their share: exit %d, %q; want a refusal naming --user-disk-fraction", code, errOut)
	}
	if p := h.proc("second"); p.State != api.StateRunning || p.Snapshot != "" {
		t.Fatalf("the refused process: %s, snapshot %q; want it running as before", p.State, p.Snapshot)
	}
	h.verifyContinued("second", ticks)
	h.memJob("roots", 64, 96)
	if _, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "roots"}); err != nil {
		t.Fatalf("root's hibernate beside the user at their share: %v", err)
	}
}
