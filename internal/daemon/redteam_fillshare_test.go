package daemon

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestRedTeamFillHeldToTheShare: a fill is held to its user's share of the
// daemon's CPU (--max-cpu-per-user), as a process start is, its helper's
// start charged with it: a real user's loop of fill and unfill cost the
// daemon's cgroup 0.64 of a CPU. At a ten-thousandth of a CPU, the user's
// first fill is done, and their next waits, while another user's fill of
// another GPU is done.
func TestRedTeamFillHeldToTheShare(t *testing.T) {
	alice, bob := testutil.NewUser(t, "gsfill-a", "gsfill"), testutil.NewUser(t, "gsfill-b", "gsfill")
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = "gsfill"; c.Limits.CPUPerUser = 0.0001 })
	if _, errOut, code := h.ctlAs(alice, "fill", "0", "--mib", "2G", "--detach"); code != 0 {
		t.Fatalf("alice's first fill: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(alice, "unfill", "0"); code != 0 {
		t.Fatalf("alice's unfill: %s", errOut)
	}
	a := h.rawAsUser(alice)
	a.send(`{"id":1,"method":"fill","params":{"gpu":{"index":0},"mib":"2G"}}`)
	if err := a.silentFor(time.Second); err != nil {
		t.Fatalf("alice's second fill, over her CPU share: %v", err)
	}
	if _, errOut, code := h.ctlAs(bob, "fill", "1", "--mib", "2G", "--detach"); code != 0 {
		t.Fatalf("bob's fill while alice waits: %s", errOut)
	}
}
