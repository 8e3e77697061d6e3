package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamRAMTierShares: one user cannot take the host RAM tier from
// another. With a 1000 MiB --ram-budget and the default
// --user-ram-fraction (0.5), a user who freezes past their 500 MiB has
// their own least recently frozen process hibernated, not another user's
// older one; a freeze larger than the share, or than the whole budget, or
// one that needs more than the user's unpinned processes could free, is
// refused before anything is evicted; and where the budget itself is short,
// the user holding more than their level gives up room first, though
// another's process was frozen before theirs.
func TestRedTeamRAMTierShares(t *testing.T) {
	hog := testutil.NewUser(t, "gsram1", "gsram")
	other := testutil.NewUser(t, "gsram2", "gsram")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.RAMBudgetMiB = "gsram", 1000 })
	freezeAs := func(u testutil.User, name string) (string, int) {
		t.Helper()
		_, errOut, code := h.ctlAs(u, "freeze", name)
		return errOut, code
	}
	mustFreeze := func(u testutil.User, name string) {
		t.Helper()
		if errOut, code := freezeAs(u, name); code != 0 {
			t.Fatalf("freeze %s: %s", name, errOut)
		}
	}
	names := []string{"b1", "r1", "a1", "a2", "a3", "a4", "a5", "r2", "b2"}
	states := func() string {
		var s []string
		for _, n := range names {
			if p, err := h.client().Process(ctxT(t), n); err == nil {
				s = append(s, n+"="+string(p.State))
			}
		}
		return strings.Join(s, " ")
	}
	wantStates := func(when, want string) {
		t.Helper()
		if got := states(); got != want {
			t.Fatalf("%s: %s, want %s", when, got, want)
		}
	}

	h.simJobAs(other, "b1", 100, 1)
	mustFreeze(other, "b1") // the least recently frozen of all
	h.memJob("r1", 300, 1)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "r1"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		h.simJobAs(hog, n, 250, 1)
	}
	mustFreeze(hog, "a1")
	mustFreeze(hog, "a2")
	// 750 MiB would pass the hog's 500: their own a1 goes, not b1.
	mustFreeze(hog, "a3")
	wantStates("after the hog's third freeze", "b1=frozen r1=frozen a1=hibernated a2=frozen a3=frozen")
	// Each user's status shows their own part and share; root's the tier.
	for _, c := range []struct {
		u    testutil.User
		want string
	}{{hog, "host ram:    900 MiB frozen (budget 1000 MiB); yours 500 MiB of 500 MiB\n"}, {other, "; yours 100 MiB of 500 MiB\n"}} {
		if out, errOut, code := h.ctlAs(c.u, "status"); code != 0 || !strings.Contains(out, c.want) {
			t.Fatalf("%s's status: exit %d, %s%s; want %q", c.u.Name, code, out, errOut, c.want)
		}
	}

	// Larger than the share: refused, naming it, and nothing evicted.
	h.simJobAs(hog, "a4", 700, 1)
	errOut, code := freezeAs(hog, "a4")
	if code == 0 || !strings.Contains(errOut, "--user-ram-fraction 0.5") {
		t.Fatalf("freeze of 700 MiB past a 500 MiB share: exit %d, %q", code, errOut)
	}
	// Larger than the budget, even for root: refused before any eviction.
	h.memJob("r2", 1100, 1)
	_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "r2"})
	wantCode(t, err, api.CodeResourceExhausted)
	wantStates("after the two refused freezes", "b1=frozen r1=frozen a1=hibernated a2=frozen a3=frozen a4=running r2=running")
	// With a3 pinned by root, only a2's 250 could go: 300 more would still
	// pass the share, so a2 stays.
	pin := true
	if _, err := h.client().Set(ctxT(t), api.SetParams{Name: "a3", Pin: &pin}); err != nil {
		t.Fatal(err)
	}
	h.simJobAs(hog, "a5", 300, 1)
	if errOut, code := freezeAs(hog, "a5"); code == 0 || !strings.Contains(errOut, "(pinned: a3)") {
		t.Fatalf("freeze of 300 MiB that only a pinned process could make room for: exit %d, %q", code, errOut)
	}
	wantStates("after the freeze refused for a pinned process", "b1=frozen r1=frozen a1=hibernated a2=frozen a3=frozen a4=running a5=running r2=running")

	// 1050 MiB would pass the budget. Root's 300 leave the users 700, a
	// level of 450 each: the hog's 500 are over it, so their a2 goes, not
	// b1, frozen first of all.
	h.simJobAs(other, "b2", 150, 1)
	mustFreeze(other, "b2")
	wantStates("after the other user's second freeze", "b1=frozen r1=frozen a1=hibernated a2=hibernated a3=frozen a4=running a5=running r2=running b2=frozen")
}

// TestFreezeRecordHeldToTheShare: the share is checked again where a
// freeze is recorded, under the lock that orders freezes, so that two of a
// user's freezes that each found room before either was recorded cannot
// pass it together. The second record is refused: 300 MiB held and 300 more
// would pass the 500 MiB share of a 1000 MiB budget, beside root's frozen
// 50 MiB.
func TestFreezeRecordHeldToTheShare(t *testing.T) {
	u := testutil.NewUser(t, "gsram3", "gsram")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.RAMBudgetMiB = "gsram", 1000 })
	h.memJob("roots", 50, 1)
	h.freeze("roots") // the share binds beside another's frozen processes
	for _, n := range []string{"first", "second"} {
		h.simJobAs(u, n, 300, 1)
	}
	if _, errOut, code := h.ctlAs(u, "freeze", "first"); code != 0 {
		t.Fatalf("freeze first: %s", errOut)
	}
	rec, ok := h.d.table.Get(proctable.Key{UID: u.UID, Name: "second"})
	if !ok {
		t.Fatal("no record of second")
	}
	procs := []proctable.CheckpointProc{{PID: rec.PID, Start: rec.PIDStart, VRAM: map[string]uint64{"GPU-0": 300}}}
	_, err := h.d.beginFreeze(rec, procs, freezeOpts{})
	var exceeded *limits.Exceeded
	if !errors.As(err, &exceeded) || exceeded.Flag != "user-ram-fraction" {
		t.Fatalf("second freeze recorded past the share: %v", err)
	}
	if p := h.proc("second"); p.State != api.StateRunning {
		t.Fatalf("the refused record left second %s", p.State)
	}
}

// TestRedTeamForkCopiesHeldToTheShare: a fork's copies whose GPU has no room
// stay frozen in host RAM (protocol.md, fork), so each copy is held to the
// budget and its owner's share as a freeze is. A user forks three copies of
// a 300 MiB process onto a full GPU with a 500 MiB share, root's 50 MiB
// frozen beside them: the first copy
// stays frozen, the two past the share are refused (the fork holds the
// first, so it cannot be hibernated for them) and leave nothing behind,
// where all three had stayed, 900 MiB in RAM.
func TestRedTeamForkCopiesHeldToTheShare(t *testing.T) {
	u := testutil.NewUser(t, "gsram4", "gsram")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.RAMBudgetMiB = "gsram", 1000 })
	h.jobs("full", 1, 3900) // GPU 1 has no room for a copy
	h.memJob("roots", 50, 1)
	h.freeze("roots")
	h.simJobAs(u, "src", 300, 1)
	_, errOut, code := h.ctlAs(u, "fork", "src", "--copies", "3", "--gpus", "1,1,1")
	if code == 0 || !strings.Contains(errOut, "2 of 3 copies failed") || !strings.Contains(errOut, "--user-ram-fraction 0.5") {
		t.Fatalf("fork of three copies past the share: exit %d, %q", code, errOut)
	}
	var states []string
	for _, n := range []string{"src", "src-1", "src-2", "src-3"} {
		state := "none"
		if p, err := h.client().Process(ctxT(t), n); err == nil {
			state = string(p.State)
		}
		states = append(states, n+"="+state)
	}
	if got, want := strings.Join(states, " "), "src=running src-1=frozen src-2=none src-3=none"; got != want {
		t.Fatalf("after the fork: %s, want %s", got, want)
	}
	if st, err := h.client().Status(ctxT(t)); err != nil || st.HostMiB != 350 {
		t.Fatalf("host RAM tier after the fork: %d MiB (%v), want 350 (root's 50 and one copy)", st.HostMiB, err)
	}
}

// TestForkCopyMakesRoomInRAM: a copy that needs room in the RAM budget
// hibernates another frozen process for it, as a freeze does. Root's
// frozen "old" (600 MiB) and a first copy (300) fill 900 of 1000 MiB; the
// second copy has "old" hibernated and stays frozen beside the first.
func TestForkCopyMakesRoomInRAM(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.RAMBudgetMiB = 1000 })
	h.jobs("full", 1, 3900) // GPU 1 has no room for a copy
	h.memJob("old", 600, 1)
	h.freeze("old")
	h.memJob("src", 300, 1)
	if _, err := h.client().Fork(ctxT(t), api.ForkParams{Name: "src", Copies: 2, GPUs: []api.GPURef{{Index: 1}, {Index: 1}}}); err != nil {
		t.Fatalf("fork: %v", err)
	}
	var states []string
	for _, n := range []string{"old", "src-1", "src-2"} {
		states = append(states, n+"="+string(h.proc(n).State))
	}
	if got, want := strings.Join(states, " "), "old=hibernated src-1=frozen src-2=frozen"; got != want {
		t.Fatalf("after the fork: %s, want %s", got, want)
	}
}

// TestRedTeamFailedHibernateLeavesNothingPastTheShare: a hibernate's freeze
// is on its way to disk and is held to no RAM budget, so a dump that fails
// after it (here the snapshot filesystem, 16 MiB, fills) must not leave
// the process frozen in RAM past its owner's share: a real user's 600 MiB
// process, past their 500 MiB share beside root's frozen 50 MiB, is thawed
// back to running with its memory, where it stayed frozen.
func TestRedTeamFailedHibernateLeavesNothingPastTheShare(t *testing.T) {
	u := testutil.NewUser(t, "gsram5", "gsram")
	snapDir := testutil.Tmpfs(t, "disk-full", "16m")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.RAMBudgetMiB, c.SnapshotDir = "gsram", 1000, snapDir
		c.DiskKeepFree, c.Limits.DiskFraction = 0, 0 // the dump itself runs out of room
	})
	h.memJob("roots", 50, 1)
	h.freeze("roots")
	h.simJobAs(u, "big", 600, 64)
	ticks := h.lastTick("big")
	_, errOut, code := h.ctlAs(u, "hibernate", "big")
	if code == 0 || !strings.Contains(errOut, "it is thawed back to running") {
		t.Fatalf("hibernate into a full filesystem: exit %d, %q", code, errOut)
	}
	if p := h.proc("big"); p.State != api.StateRunning || h.used(0) != 600 {
		t.Fatalf("after the failed hibernate: %s, GPU 0 used %d MiB; want running with 600", p.State, h.used(0))
	}
	h.verifyContinued("big", ticks)
}

// simJobAs runs, as u, a simulated job name holding vram MiB on GPU 0 and
// hostMiB of patterned host memory, and waits until it ticks.
func (h *ckptHarness) simJobAs(u testutil.User, name string, vram, hostMiB int) {
	h.t.Helper()
	if _, errOut, code := h.ctlAs(u, "run", name, "--gpu", "0", "--", h.bins.SimJob, "--vram", fmt.Sprint(vram), "--host-mem", fmt.Sprint(hostMiB), "--tick", "0.02"); code != 0 {
		h.t.Fatalf("run %s as %s: %s", name, u.Name, errOut)
	}
	h.followCount(name, "tick 3", 1)
}

// TestRAMShareBindsBesideOthersOnly: a user alone in the host RAM tier may
// use all of the budget (one researcher's models on their own box), and
// the share binds once another user's frozen processes are there too. A
// real user freezes two 300 MiB processes past their 500 MiB share while
// no one else's are frozen; root then freezes 100 MiB, and the user's third
// freeze has their own least recently frozen hibernated.
func TestRAMShareBindsBesideOthersOnly(t *testing.T) {
	u := testutil.NewUser(t, "gsram6", "gsram")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.RAMBudgetMiB = "gsram", 1000 })
	for _, n := range []string{"u1", "u2", "u3"} {
		h.simJobAs(u, n, 300, 1)
	}
	for _, n := range []string{"u1", "u2"} {
		if _, errOut, code := h.ctlAs(u, "freeze", n); code != 0 {
			t.Fatalf("freeze %s while alone in the tier: %s", n, errOut)
		}
	}
	if p1, p2 := h.proc("u1"), h.proc("u2"); p1.State != api.StateFrozen || p2.State != api.StateFrozen {
		t.Fatalf("the user's two freezes while alone in the tier: %s, %s; want both frozen", p1.State, p2.State)
	}
	h.memJob("roots", 100, 1)
	h.freeze("roots")
	if _, errOut, code := h.ctlAs(u, "freeze", "u3"); code != 0 {
		t.Fatalf("freeze u3: %s", errOut)
	}
	var states []string
	for _, n := range []string{"u1", "u2", "u3", "roots"} {
		states = append(states, n+"="+string(h.proc(n).State))
	}
	if got, want := strings.Join(states, " "), "u1=hibernated u2=hibernated u3=frozen roots=frozen"; got != want {
		t.Fatalf("after the user's third freeze beside root's: %s, want %s", got, want)
	}
}

// TestRedTeamFailedThawFromDiskLeavesNothingPastTheShare: a thaw from disk
// whose restore went through but whose thaw failed (the driver's restore,
// here) left the process frozen in host RAM, where the restore held it to
// no budget: a user could park any number that way. Now it is hibernated
// again where the budget or the user's share has no room for it, and the
// next thaw brings it back.
func TestRedTeamFailedThawFromDiskLeavesNothingPastTheShare(t *testing.T) {
	u := testutil.NewUser(t, "gsram7", "gsram")
	h := newDiskHarness(t, config.DriverCLI, func(c *config.Config) { c.Group, c.RAMBudgetMiB = "gsram", 1000 })
	h.memJob("roots", 100, 1)
	h.freeze("roots") // beside root's, the user's share binds: 500 MiB
	h.simJobAs(u, "big", 600, 1)
	if _, errOut, code := h.ctlAs(u, "hibernate", "big"); code != 0 {
		t.Fatalf("hibernate big: %s", errOut)
	}
	h.faults(`{"restore": {"error": "CUDA_ERROR_UNKNOWN", "times": 1}}`)
	_, errOut, code := h.ctlAs(u, "thaw", "big")
	if p := h.proc("big"); code == 0 || p.State != api.StateHibernated || !strings.Contains(errOut, "it is hibernated again") {
		t.Fatalf("a thaw from disk failing after its restore: exit %d, %q, the process %s; want it refused and hibernated again", code, errOut, p.State)
	}
	if _, errOut, code := h.ctlAs(u, "thaw", "big"); code != 0 {
		t.Fatalf("the next thaw: %s", errOut)
	}
	if p := h.proc("big"); p.State != api.StateRunning {
		t.Fatalf("big is %s after the next thaw", p.State)
	}
}
