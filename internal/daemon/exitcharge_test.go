package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestExitChargedToTheOwner: the daemon's work when a user's process ends
// (its exit recorded, its job's attempt settled) is charged to the owner's
// share of the daemon's CPU, as its start is. A user's queue of quick jobs
// left about 5.7 ms of the daemon's CPU a job held to no share.
func TestExitChargedToTheOwner(t *testing.T) {
	alice := testutil.NewUser(t, "gsexit-a", "gsexit")
	budget := &countingBudget{uid: alice.UID}
	h := prepareHarness(t, func(c *config.Config) { c.Group = alice.Group })
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = bulkgate.New(1).Metered(budget) })
	h.start()
	h.mustCtl(alice, "run", "--dir", "/", "lone", "--", "sleep", "1000")
	h.mustCtl(alice, "submit", "--dir", "/", "--name", "queued", "--", "sleep", "1000")
	waitFor(t, func() bool {
		j, err := h.client().Job(ctxT(t), "queued")
		return err == nil && j.State == api.JobRunning
	})
	// Her run, her submission and her job's start are charged once each.
	awaitCharges(t, budget, 3)
	for _, name := range []string{"lone", "queued"} {
		if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: name, Signal: "KILL"}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitExit("lone")
	h.waitExit("queued")
	// Two exits recorded, one attempt settled.
	awaitCharges(t, budget, 6)
}

// awaitCharges waits until b has counted n charges.
func awaitCharges(t *testing.T, b *countingBudget, n int32) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); b.n.Load() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d charges to the owner, want %d", b.n.Load(), n)
		}
	}
}

// countingBudget counts the charges to uid's share; nobody ever waits.
type countingBudget struct {
	uid uint32
	n   atomic.Int32
}

func (b *countingBudget) Wait(context.Context, uint32) error { return nil }

func (b *countingBudget) Within(uint32) bool { return true }

func (b *countingBudget) Charge(uid uint32, _ time.Duration) {
	if uid == b.uid {
		b.n.Add(1)
	}
}

// TestFillChargesTheHelpersStart: a user's fill is charged twice to their
// share: the call's thread, as any metered call's, and what the helper it
// started spent, which that thread does not see.
func TestFillChargesTheHelpersStart(t *testing.T) {
	alice := testutil.NewUser(t, "gsfillc-a", "gsfillc")
	budget := &countingBudget{uid: alice.UID}
	h := prepareHarness(t, func(c *config.Config) { c.Group = alice.Group; c.Sim = fillGPU })
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = bulkgate.New(1).Metered(budget) })
	h.start()
	h.mustCtl(alice, "fill", "0", "--mib", "2G", "--detach")
	awaitCharges(t, budget, 2)
}
