package daemon

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamOneCRIUAtATimePerUser: CRIU's dumps and restores run in the
// daemon's cgroup, held to no share (a real user's loop of hibernate and
// thaw of one process had CRIU take half of a 2-CPU VM), so a user's run
// one at a time: their loops on many processes cannot take every CPU.
// The test holds the user's turn itself: the user's hibernate, then their
// thaw from disk, wait for it, while root's, asked after, are done; once
// the turn is given back the user's are done too.
func TestRedTeamOneCRIUAtATimePerUser(t *testing.T) {
	u := testutil.NewUser(t, "gscriu1", "gscriu")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gscriu" })
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "16", "--tick", "0.02"); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "tick 3", 1)
	h.memJob("roots", 64, 16)
	ticks := h.lastTick("theirs")

	release, err := h.d.criuTurns.Take(ctxT(t), u.UID)
	if err != nil {
		t.Fatal(err)
	}
	theirs := make(chan string, 1)
	go func() {
		_, errOut, code := h.ctlAs(u, "hibernate", "theirs")
		theirs <- strconv.Itoa(code) + " " + errOut
	}()
	h.waitState("theirs", api.StateHibernating) // frozen, then waits for its turn to be dumped
	if _, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "roots"}); err != nil {
		t.Fatalf("root's hibernate while the user's waits for their turn: %v", err)
	}
	select {
	case got := <-theirs:
		t.Fatalf("the user's hibernate ended (%s) while their CRIU turn was held", got)
	default:
	}
	if p := h.proc("theirs"); p.State != api.StateHibernating {
		t.Fatalf("the user's process while it waits: %s, want hibernating", p.State)
	}
	release()
	if got := <-theirs; got != "0 " {
		t.Fatalf("the user's hibernate once the turn was given back: %q", got)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process: %s, want hibernated", p.State)
	}

	// The same for a restore: the user's thaw from disk waits, hibernated,
	// while root's goes.
	if release, err = h.d.criuTurns.Take(ctxT(t), u.UID); err != nil {
		t.Fatal(err)
	}
	go func() {
		_, errOut, code := h.ctlAs(u, "thaw", "theirs")
		theirs <- strconv.Itoa(code) + " " + errOut
	}()
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "roots"}); err != nil {
		t.Fatalf("root's thaw while the user's waits for their turn: %v", err)
	}
	select {
	case got := <-theirs:
		t.Fatalf("the user's thaw ended (%s) while their CRIU turn was held", got)
	default:
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process while its thaw waits: %s, want hibernated", p.State)
	}
	release()
	if got := <-theirs; got != "0 " {
		t.Fatalf("the user's thaw once the turn was given back: %q", got)
	}
	h.verifyContinued("theirs", ticks) // its memory whole, its counter going on
}

// TestEvictionWaitsForNoOnesCRIUTurn: an eviction to make room for
// another's freeze dumps the owner's process without waiting for the
// owner's CRIU turn: root's freeze, which evicts the user's frozen process
// while the test holds that user's turn, is done, and the user's process is
// hibernated. Waiting, it would wait for as long as the user kept their
// own dumps going.
func TestEvictionWaitsForNoOnesCRIUTurn(t *testing.T) {
	u := testutil.NewUser(t, "gscriu2", "gscriu")
	h, _ := evictableHarness(t, u)
	release, err := h.d.criuTurns.Take(ctxT(t), u.UID)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := h.client().Freeze(ctx, api.FreezeParams{Name: "roots"}); err != nil {
		t.Fatalf("root's freeze, which evicts the user's process while the user's CRIU turn is held: %v", err)
	}
	if p := h.proc("theirs"); p.State != api.StateHibernated {
		t.Fatalf("the user's process: %s, want hibernated (evicted)", p.State)
	}
}

// evictableHarness is a disk-tier daemon (mods applied) with a 300 MiB
// --ram-budget, all of it a user's to hold (--user-ram-fraction 1), where u, in group gscriu, has run "theirs" (256 MiB of GPU
// memory) and frozen it in RAM, and root runs "roots" as large: root's
// freeze of it must evict the user's process. It returns the last tick of
// the user's process.
func evictableHarness(t *testing.T, u testutil.User, mods ...func(*config.Config)) (*ckptHarness, int) {
	t.Helper()
	h := newDiskHarness(t, config.DriverSim, append([]func(*config.Config){func(c *config.Config) { c.Group, c.RAMBudgetMiB, c.Limits.RAMFraction = "gscriu", 300, 1 }}, mods...)...)
	if _, errOut, code := h.ctlAs(u, "run", "theirs", "--gpu", "0", "--", h.bins.SimJob, "--vram", "256", "--host-mem", "1", "--tick", "0.02"); code != 0 {
		t.Fatalf("run theirs: %s", errOut)
	}
	h.followCount("theirs", "tick 3", 1)
	if _, errOut, code := h.ctlAs(u, "freeze", "theirs"); code != 0 {
		t.Fatalf("freeze theirs: %s", errOut)
	}
	ticks := h.lastTick("theirs")
	h.memJob("roots", 256, 1)
	return h, ticks
}
