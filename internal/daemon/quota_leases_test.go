package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// leaseResult decodes a successful acquire's response, failing t otherwise.
func leaseResult(t *testing.T, what string, resp map[string]any) api.Lease {
	t.Helper()
	if resp["ok"] != true {
		t.Fatalf("%s: %v", what, resp)
	}
	b, _ := json.Marshal(resp["result"])
	var l api.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// wantRawExhausted checks a raw response is resource_exhausted naming
// the user and --flag.
func wantRawExhausted(t *testing.T, what string, resp map[string]any, user, flag string) {
	t.Helper()
	msg, _ := resp["error"].(string)
	if resp["ok"] == true || resp["code"] != string(api.CodeResourceExhausted) || !strings.Contains(msg, user) || !strings.Contains(msg, "--"+flag) {
		t.Errorf("%s: %v; want resource_exhausted naming %s and --%s", what, resp, user, flag)
	}
}

var smallLease = api.AcquireParams{MinFree: api.VRAM{MiB: 1024}}

// TestQuotaLeasesPerUser: a user capped at two leases gets a third
// acquire refused (resource_exhausted naming the user and
// --max-leases-per-user) and nothing queued; a release gives the slot
// back. Another user and root are not held to alice's count.
func TestQuotaLeasesPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, quoAlice, quoGroup), testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.LeasesPerUser = 2 })
	rc := h.rawAsUser(alice)
	first := leaseResult(t, "alice's first lease", rc.call(api.MethodAcquire, smallLease))
	leaseResult(t, "alice's second lease", rc.call(api.MethodAcquire, smallLease))
	wantRawExhausted(t, "alice's third lease", rc.call(api.MethodAcquire, smallLease), quoAlice, "max-leases-per-user")
	if n := len(h.d.leases.granted()); n != 2 {
		t.Fatalf("%d leases held after a refused acquire, want 2", n)
	}

	leaseResult(t, "bob's lease", h.rawAsUser(bob).call(api.MethodAcquire, smallLease))
	root := h.raw()
	for i := range 3 {
		leaseResult(t, "root's lease "+strconv.Itoa(i), root.call(api.MethodAcquire, smallLease))
	}

	if resp := rc.call(api.MethodRelease, api.ReleaseParams{ID: first.ID}); resp["ok"] != true {
		t.Fatalf("release: %v", resp)
	}
	leaseResult(t, "alice's lease after a release", rc.call(api.MethodAcquire, smallLease))
	wantRawExhausted(t, "alice's lease past the cap again", rc.call(api.MethodAcquire, smallLease), quoAlice, "max-leases-per-user")
}

// TestQuotaLeaseMaxHold: a user's granted lease says when it expires and
// is released by the daemon after --user-lease-max-hold, with a release
// event that says why; the user's connection stays usable. Root's lease,
// acquired before, is still held.
func TestQuotaLeaseMaxHold(t *testing.T) {
	const hold = 500 * time.Millisecond
	alice := testutil.NewUser(t, quoAlice, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup; c.Limits.LeaseMaxHold = hold })
	rootLease := leaseResult(t, "root's lease", h.raw().call(api.MethodAcquire, smallLease))
	if !rootLease.ExpiresAt.IsZero() {
		t.Errorf("root's lease expires at %v; root's leases are held until released", rootLease.ExpiresAt)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subscribed := make(chan struct{})
	released := make(chan *api.Event, 1)
	failed := make(chan error, 1)
	seen := errors.New("seen")
	go func() {
		err := h.client().Events(ctx, api.EventsParams{}, func(e *api.Event) error {
			switch {
			case e.Type == api.EventSubscribed:
				close(subscribed)
			case e.Type == api.EventLease && e.Lease != nil && e.Lease.UID == alice.UID && !e.Lease.ReleasedAt.IsZero():
				released <- e
				return seen
			}
			return nil
		})
		if !errors.Is(err, seen) {
			failed <- err
		}
	}()
	select {
	case <-subscribed:
	case err := <-failed:
		t.Fatalf("events: %v", err)
	}

	rc := h.rawAsUser(alice)
	l := leaseResult(t, "alice's lease", rc.call(api.MethodAcquire, smallLease))
	if got := l.ExpiresAt.Sub(l.AcquiredAt); got != hold {
		t.Errorf("alice's lease expires %v after it was acquired, want %v", got, hold)
	}
	var e *api.Event
	select {
	case e = <-released:
	case err := <-failed:
		t.Fatalf("no release event for alice's lease: %v", err)
	}
	if e.Lease.ID != l.ID || !strings.Contains(e.Warning, "--user-lease-max-hold") {
		t.Errorf("release event %+v (warning %q); want lease %s, saying --user-lease-max-hold", e.Lease, e.Warning, l.ID)
	}
	resp := rc.call(api.MethodLeases, nil)
	if resp["ok"] != true {
		t.Fatalf("alice's connection after the release: %v", resp)
	}
	var held []string
	for _, g := range h.d.leases.granted() {
		held = append(held, g.id)
	}
	if len(held) != 1 || held[0] != rootLease.ID {
		t.Errorf("held leases %v; want only root's %s", held, rootLease.ID)
	}
}

// TestQuotaLeaseFraction: a user's leases hold at most
// --user-lease-fraction of all GPUs' memory together, a lease without
// min_free counting its GPUs whole (one user's exclusive lease of every
// GPU kept every other user's jobs waiting for --user-lease-max-hold, and
// again after it: a red-team pass). Past it acquire is refused
// (resource_exhausted naming the user and the flag) and nothing is
// queued; another user has a share of their own, and root none.
func TestQuotaLeaseFraction(t *testing.T) {
	alice, bob := testutil.NewUser(t, quoAlice, quoGroup), testutil.NewUser(t, quoBob, quoGroup)
	h := newHarness(t, func(c *config.Config) { c.Group = quoGroup })
	if err := h.d.sampler.refresh(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	gpus := h.d.gpuView().devices
	if len(gpus) != 2 || gpus[0].TotalMiB != gpus[1].TotalMiB {
		t.Fatalf("want two simulated GPUs of one size: %+v", gpus)
	}
	whole := gpus[0].TotalMiB
	rc := h.rawAsUser(alice)
	wantRawExhausted(t, "alice's lease of both GPUs", rc.call(api.MethodAcquire, api.AcquireParams{GPUs: 2}), quoAlice, "user-lease-fraction")
	wantRawExhausted(t, "alice's lease of most of each GPU", rc.call(api.MethodAcquire, api.AcquireParams{GPUs: 2, MinFree: api.VRAM{MiB: whole * 9 / 10}}), quoAlice, "user-lease-fraction")
	// min_free times gpus past 2^64 MiB, which wrapped round to 0 (red team K7).
	wantRawExhausted(t, "alice's lease of a size that wraps", rc.call(api.MethodAcquire, api.AcquireParams{GPUs: 1 << 20, MinFree: api.VRAM{MiB: 1 << 44}}), quoAlice, "user-lease-fraction")
	if n := len(h.d.leases.granted()); n != 0 {
		t.Fatalf("%d leases held after refused acquires", n)
	}
	leaseResult(t, "alice's lease of one GPU", rc.call(api.MethodAcquire, api.AcquireParams{GPUs: 1}))
	wantRawExhausted(t, "alice's lease past her share", rc.call(api.MethodAcquire, smallLease), quoAlice, "user-lease-fraction")
	leaseResult(t, "bob's lease of half the other GPU", h.rawAsUser(bob).call(api.MethodAcquire, api.AcquireParams{MinFree: api.VRAM{MiB: whole / 2}}))
	leaseResult(t, "root's lease of the rest", h.raw().call(api.MethodAcquire, api.AcquireParams{MinFree: api.VRAM{MiB: whole / 4}}))
}
