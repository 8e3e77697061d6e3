package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamWaitingThawsServedInTurn: one user's many thaws waiting for
// GPU memory do not crowd out another user's. A real user has ten frozen
// processes waiting to thaw onto a full GPU; another user's one, asked
// last, waits too; root frees room for two: the first user's first and the
// other user's are admitted, and once root frees the rest, every waiting
// thaw goes through.
func TestRedTeamWaitingThawsServedInTurn(t *testing.T) {
	hog := testutil.NewUser(t, "gsturn1", "gsturn")
	victim := testutil.NewUser(t, "gsturn2", "gsturn")
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.ThawMarginMiB = "gsturn", 100 })
	var hogs []string
	for i := range 10 {
		hogs = append(hogs, fmt.Sprintf("h%d", i+1))
	}
	for _, n := range hogs {
		h.simJobAs(hog, n, 300, 1)
	}
	h.simJobAs(victim, "v", 300, 1)
	for _, n := range append(hogs, "v") {
		u := hog
		if n == "v" {
			u = victim
		}
		if _, errOut, code := h.ctlAs(u, "freeze", n); code != 0 {
			t.Fatalf("freeze %s: %s", n, errOut)
		}
	}
	h.jobs("sq1", 0, 3300)
	h.jobs("sq2", 0, 500) // 296 MiB free: no 300 MiB thaw fits beside the margin

	type thawed struct {
		name, errOut string
		code         int
	}
	done := make(chan thawed, len(hogs)+1)
	thawAs := func(u testutil.User, n string) {
		want := h.d.thaws.Waiting() + 1
		go func() {
			_, errOut, code := h.ctlAs(u, "thaw", n, "--timeout", "2m")
			done <- thawed{n, errOut, code}
		}()
		waitFor(t, func() bool { return h.d.thaws.Waiting() == want })
	}
	for _, n := range hogs {
		thawAs(hog, n)
	}
	thawAs(victim, "v")

	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "sq2"}); err != nil {
		t.Fatal(err)
	}
	h.refresh() // 796 MiB free: room for two
	var first []string
	for range 2 {
		th := <-done
		if th.code != 0 {
			t.Fatalf("thaw %s: %s", th.name, th.errOut)
		}
		first = append(first, th.name)
	}
	if got := strings.Join(first, " "); got != "h1 v" && got != "v h1" {
		t.Fatalf("with room for two the thaws of %s went through; want h1 and v (%s's only, asked last)", got, victim.Name)
	}
	if n := h.d.thaws.Waiting(); n != len(hogs)-1 {
		t.Fatalf("%d thaws still waiting, want %d", n, len(hogs)-1)
	}

	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "sq1"}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	for range len(hogs) - 1 {
		if th := <-done; th.code != 0 {
			t.Fatalf("thaw %s once there was room: %s", th.name, th.errOut)
		}
	}
	for _, n := range append(hogs, "v") {
		if p := h.proc(n); p.State != api.StateRunning {
			t.Fatalf("%s is %s after its thaw", n, p.State)
		}
	}
}

// TestRedTeamLongWaitingThawHoldsItsGPU: a thaw waiting past
// --starve-after holds its GPU: another user's smaller thaws, waiting or
// not, no longer take the memory it waits for, and it goes through once
// enough is free.
func TestRedTeamLongWaitingThawHoldsItsGPU(t *testing.T) {
	big := testutil.NewUser(t, "gsturn3", "gsturn")
	small := testutil.NewUser(t, "gsturn4", "gsturn")
	const starve = 300 * time.Millisecond
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Group, c.ThawMarginMiB, c.StarveAfter = "gsturn", 100, starve })
	h.simJobAs(big, "big", 3000, 1)
	h.simJobAs(small, "s1", 300, 1)
	h.simJobAs(small, "s2", 300, 1)
	for _, p := range []struct {
		u testutil.User
		n string
	}{{big, "big"}, {small, "s1"}, {small, "s2"}} {
		if _, errOut, code := h.ctlAs(p.u, "freeze", p.n); code != 0 {
			t.Fatalf("freeze %s: %s", p.n, errOut)
		}
	}
	h.jobs("sq", 0, 2500) // 1596 MiB free: room for the small ones, not for big

	done := make(chan string, 1)
	go func() {
		_, errOut, _ := h.ctlAs(big, "thaw", "big", "--timeout", "2m")
		done <- errOut
	}()
	waitFor(t, func() bool { return h.d.thaws.Waiting() == 1 })
	if _, errOut, code := h.ctlAs(small, "thaw", "s1"); code != 0 {
		t.Fatalf("a smaller thaw before --starve-after: %s", errOut)
	}
	deadline := time.Now().Add(starve)
	waitFor(t, func() bool { return time.Now().After(deadline) })
	_, errOut, code := h.ctlAs(small, "thaw", "s2")
	if code == 0 || !strings.Contains(errOut, "GPU 0 is held for a thaw of gsturn3's waiting since") {
		t.Fatalf("a smaller thaw past --starve-after: exit %d, %q; want it refused naming the hold", code, errOut)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "sq"}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	if errOut := <-done; errOut != "" {
		t.Fatalf("the held thaw once there was room: %s", errOut)
	}
	if p := h.proc("big"); p.State != api.StateRunning {
		t.Fatalf("big is %s after its thaw", p.State)
	}
}

// TestRedTeamThawsLeaveAStarvingJobItsGPU: a GPU placement holds for a
// queued job starving past --starve-after takes no thaw of another
// user's, however free: before, each thaw that fitted went in, and a
// stream of them kept the big job waiting for as long as they came.
func TestRedTeamThawsLeaveAStarvingJobItsGPU(t *testing.T) {
	queued := testutil.NewUser(t, "gsturn7", "gsturn")
	thawer := testutil.NewUser(t, "gsturn8", "gsturn")
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Sim, c.Group, c.ThawMarginMiB, c.StarveAfter = "1x4G", "gsturn", 100, 300*time.Millisecond
	})
	h.simJobAs(thawer, "m", 1000, 1)
	if _, errOut, code := h.ctlAs(thawer, "freeze", "m"); code != 0 {
		t.Fatalf("freeze m: %s", errOut)
	}
	h.jobs("sq", 0, 2000) // the big job waits behind it: 3000+512 MiB needed, 2096 free
	if _, errOut, code := h.ctlAs(queued, "submit", "--name", "big", "--vram", "3000", "--", h.bins.SimJob, "--vram", "3000"); code != 0 {
		t.Fatalf("submit big: %s", errOut)
	}
	uuid := simgpu.DeviceUUID(0)
	waitFor(t, func() bool { return h.d.sched.reasons.Load().reserved[uuid] != "" })

	_, errOut, code := h.ctlAs(thawer, "thaw", "m")
	if code == 0 || !strings.Contains(errOut, "GPU 0 is held for starving job") || !strings.Contains(errOut, "(big of gsturn7)") {
		t.Fatalf("a thaw onto the GPU held for the starving job: exit %d, %q; want it refused naming the job", code, errOut)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "sq"}); err != nil {
		t.Fatal(err)
	}
	h.waitJobState("big", api.JobRunning)
}
