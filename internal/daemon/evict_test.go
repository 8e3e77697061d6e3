package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestEvictionHibernatesByPolicy(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.RAMBudgetMiB = 600 })
	c := h.client()
	for _, n := range []string{"vip", "low", "x", "y", "z"} {
		h.memJob(n, 256, 1)
	}
	prio := 5
	if _, err := c.Set(ctxT(t), api.SetParams{Name: "vip", Priority: &prio}); err != nil {
		t.Fatal(err)
	}
	freeze := func(name string) error {
		_, err := c.Freeze(ctxT(t), api.FreezeParams{Name: name})
		return err
	}
	states := func() string {
		var s []string
		for _, n := range []string{"vip", "low", "x", "y", "z"} {
			s = append(s, n+"="+string(h.proc(n).State))
		}
		return strings.Join(s, " ")
	}
	// vip is frozen first (least recently used), low second; x does not
	// fit beside both: the lowest priority goes to disk, not the oldest.
	low, _ := h.record("low")
	for _, n := range []string{"vip", "low", "x"} {
		if err := freeze(n); err != nil {
			t.Fatalf("freeze %s: %v", n, err)
		}
	}
	if got, want := states(), "vip=frozen low=hibernated x=frozen y=running z=running"; got != want {
		t.Fatalf("after freezing x: %s, want %s", got, want)
	}
	// The room is made once the evicted tree has died, its memory freed,
	// not merely once it is on disk (a hibernate asked for answers sooner).
	if procfs.Alive(low.InitPID, low.InitStart) {
		t.Fatalf("the evicted tree (init %d) is still alive when the freeze that evicted it answers", low.InitPID)
	}
	if p := h.proc("low"); !strings.Contains(p.Note, "to make room") {
		t.Fatalf("evicted process does not say why: %q", p.Note)
	}
	// Equal priority: the least recently frozen goes (x before nothing
	// else: vip outranks it).
	if err := freeze("y"); err != nil {
		t.Fatal(err)
	}
	if got, want := states(), "vip=frozen low=hibernated x=hibernated y=frozen z=running"; got != want {
		t.Fatalf("after freezing y: %s, want %s", got, want)
	}
	// Pinned processes are never evicted; with nothing else to evict the
	// freeze fails and changes nothing.
	pin := true
	for _, n := range []string{"vip", "y"} {
		if _, err := c.Set(ctxT(t), api.SetParams{Name: n, Pin: &pin}); err != nil {
			t.Fatal(err)
		}
	}
	err := freeze("z")
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "pinned: vip, y") {
		t.Fatalf("error does not name the pinned processes: %v", err)
	}
	if got, want := states(), "vip=frozen low=hibernated x=hibernated y=frozen z=running"; got != want {
		t.Fatalf("after the refused freeze: %s, want %s", got, want)
	}
}

func TestTTLHibernatesAndIdleFreezes(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("ttl", 128, 1)
	ttl := api.Duration(300 * time.Millisecond)
	if _, err := c.Set(ctxT(t), api.SetParams{Name: "ttl", TTL: &ttl}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "ttl"}); err != nil {
		t.Fatal(err)
	}
	h.waitState("ttl", api.StateHibernated)
	if p := h.proc("ttl"); !strings.Contains(p.Note, "ttl") {
		t.Fatalf("TTL hibernate does not say why: %q", p.Note)
	}

	// A job whose GPU memory stays put is idle: frozen after its Idle time.
	_, err := c.Run(ctxT(t), api.RunParams{Name: "idle", Dir: "/", GPU: &api.GPURef{Index: 1}, Idle: api.Duration(300 * time.Millisecond),
		Cmd: []string{h.bins.SimJob, "--vram", "64"}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitState("idle", api.StateFrozen)
}

func TestPolicyNeedsRootAndValidValues(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("p", 64, 1)
	neg := api.Duration(-time.Second)
	short := api.Duration(time.Millisecond)
	big := 5000
	for _, p := range []api.SetParams{{Name: "p", TTL: &neg}, {Name: "p", Idle: &short}, {Name: "p", Priority: &big}} {
		_, err := c.Set(ctxT(t), p)
		wantCode(t, err, api.CodeInvalidArgument)
	}
	_, err := c.Set(ctxT(t), api.SetParams{Name: "nope"})
	wantCode(t, err, api.CodeNotFound)
	if pol := h.proc("p").Policy; pol != (api.Policy{}) {
		t.Fatalf("refused sets changed the policy: %+v", pol)
	}
}

// waitState follows events until name reaches state.
func (h *ckptHarness) waitState(name string, state api.State) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reached := errors.New("reached")
	err := h.client().Events(ctx, api.EventsParams{Name: name}, func(e *api.Event) error {
		if e.Type == api.EventSubscribed {
			if p, err := h.client().Process(ctx, name); err == nil && p.State == state {
				return reached
			}
		}
		if e.State == state {
			return reached
		}
		return nil
	})
	if !errors.Is(err, reached) {
		h.t.Fatalf("%s never became %s: %v (now %s)", name, state, err, h.proc(name).State)
	}
}
