package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamJobStartsHeldToTheShare: a real user's queued jobs are
// started within their share of the daemon's CPU, as their runs are: over
// it (a ten-thousandth of a CPU here, which their submission alone uses
// up), their jobs wait, starting, while another user's run starts and ends
// at once. A user's queue of quick jobs kept the daemon at 0.58 of a CPU.
func TestRedTeamJobStartsHeldToTheShare(t *testing.T) {
	alice, bob := testutil.NewUser(t, "gsjobs-a", "gsjobs"), testutil.NewUser(t, "gsjobs-b", "gsjobs")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsjobs"; c.Limits.CPUPerUser = 0.0001 })
	if _, errOut, code := h.ctlAs(alice, "submit", "--dir", "/", "--name", "quick", "--", "true"); code != 0 {
		t.Fatalf("alice's submit: %s", errOut)
	}
	waitFor(t, func() bool {
		j, err := h.client().Job(ctxT(t), "quick")
		return err == nil && j.State != api.JobQueued
	})
	if _, errOut, code := h.ctlAs(bob, "run", "--dir", "/", "bobs", "--", "true"); code != 0 {
		t.Fatalf("bob's run while alice's job waits: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(bob, "wait", "bobs"); code != 0 {
		t.Fatalf("bob's wait: %s", errOut)
	}
	j, err := h.client().Job(ctxT(t), "quick")
	if err != nil {
		t.Fatal(err)
	}
	if j.State != api.JobStarting {
		t.Fatalf("alice's job is %s once bob's run has ended; want starting, waiting for her share", j.State)
	}
}
