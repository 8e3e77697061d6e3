package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// On two simulated 24 GiB GPUs, half a GPU is 12288 MiB.
const fillHalf = 12288

// TestQuotaFillFraction: a user's fill, refill or run --filled that would
// hold more than --user-fill-fraction of a GPU is refused with
// resource_exhausted naming the user and the flag, and changes nothing;
// at the cap it is held. The cap is the owner's: root may not raise
// alice's filler past it, while root's own filler is not capped.
func TestQuotaFillFraction(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = quoGroup; c.Limits.FillFraction = 0.5 })
	const flag = "user-fill-fraction"
	for _, args := range [][]string{{"fill", "0", "--ratio", "0.9", "--detach"}, {"fill", "0", "--mib", "13G", "--detach"}} {
		_, stderr, code := h.ctlAs(alice, args...)
		wantExhausted(t, "fill above the cap", stderr, code, quoAlice, flag)
	}
	if fs, err := h.client().Fillers(ctxT(t)); err != nil || len(fs) != 0 {
		t.Fatalf("refused fills left fillers %+v (%v)", fs, err)
	}
	h.mustCtl(alice, "fill", "0", "--ratio", "0.5", "--detach")
	h.waitSettled(0, fillHalf)
	_, stderr, code := h.ctlAs(alice, "fill", "0", "--ratio", "0.9", "--detach")
	wantExhausted(t, "refill above the cap", stderr, code, quoAlice, flag)
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.9}); api.CodeOf(err) != api.CodeResourceExhausted {
		t.Errorf("root raising alice's filler past her cap: %v; want resource_exhausted", err)
	}
	if f := h.filler(0); f.TargetMiB != fillHalf {
		t.Errorf("a refused refill changed the target to %d MiB", f.TargetMiB)
	}

	_, stderr, code = h.ctlAs(alice, "run", "--dir", "/", "--gpu", "1", "--filled", "0.9", "filled", "--", "sleep", "1000")
	wantExhausted(t, "run --filled above the cap", stderr, code, quoAlice, flag)
	if _, ok := h.record("filled"); ok {
		t.Error("a refused run --filled started its process")
	}

	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 1}, Ratio: 0.9}); err != nil {
		t.Fatalf("root's fill at 0.9: %v", err)
	}
}

// TestQuotaFillFractionRestart: a user's persisted filler above the cap
// (made before the cap was set) comes back after a restart brought down to
// it, and holds no more.
func TestQuotaFillFractionRestart(t *testing.T) {
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newQueueHarness(t, "2x24G", func(c *config.Config) { c.Group = quoGroup; c.Limits.FillFraction = 0 })
	h.mustCtl(alice, "fill", "1", "--ratio", "0.9", "--detach")
	if f := h.filler(1); f.TargetMiB <= fillHalf {
		t.Fatalf("uncapped filler's target %d MiB", f.TargetMiB)
	}
	h.stop()
	h.cfg.Limits.FillFraction = 0.5
	h.begin()
	if f := h.filler(1); f.TargetMiB != fillHalf || f.User != quoAlice {
		t.Fatalf("after a restart under the cap alice's filler is %+v; want a target of %d MiB", f, fillHalf)
	}
	h.waitSettled(1, fillHalf)
}
