package thawqueue

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// gpus is a stand-in sample: one or more GPUs whose use the test sets.
type gpus struct {
	mu    sync.Mutex
	total map[string]uint64
	used  map[string]uint64
	yield map[uint32]uint64 // per uid, on every GPU
	held  map[string]uint64 // per process ID, on every GPU
	saved map[string]string // GPU UUID -> the starving work placement holds it for
}

func newGPUs(uuids ...string) *gpus {
	g := &gpus{total: map[string]uint64{}, used: map[string]uint64{}, yield: map[uint32]uint64{}, held: map[string]uint64{}, saved: map[string]string{}}
	for _, u := range uuids {
		g.total[u] = 4096
	}
	return g
}

func (g *gpus) Device(uuid string) (uint64, uint64, int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.total[uuid]
	return t, g.used[uuid], strings.Index("ABCD", uuid), ok
}

func (g *gpus) Yield(uuid string, uid uint32) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.yield[uid]
}

func (g *gpus) Held(uuid string, r Request) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	var n uint64
	for proc, mib := range g.held {
		if proc != r.Proc {
			n += mib
		}
	}
	return n
}

func (g *gpus) Reserved(uuid string, r Request, seq uint64) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.saved[uuid]
}

func (g *gpus) set(uuid string, used uint64) {
	g.mu.Lock()
	g.used[uuid] = used
	g.mu.Unlock()
}

func newQueue(g *gpus, hold time.Duration) *Queue {
	return New(func() GPUs { return g }, 100, hold, nil, &served{last: map[string]time.Time{}})
}

// served stands in for the caller's record of service: each Serve a tick
// later than the one before.
type served struct {
	mu   sync.Mutex
	n    int
	last map[string]time.Time
}

func (s *served) Last(owner string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[owner]
}

func (s *served) Serve(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	s.last[owner] = time.Unix(0, 0).Add(time.Duration(s.n))
}

// outcome is one Admit's answer.
type outcome struct {
	name    string
	release func()
	err     error
}

// arrive starts a waiting thaw named name and returns once it waits.
func arrive(t *testing.T, q *Queue, name string, r Request, wait time.Duration, out chan<- outcome) {
	t.Helper()
	n := q.Waiting()
	go func() {
		release, err := q.Admit(context.Background(), r, wait)
		out <- outcome{name, release, err}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for q.Waiting() == n {
		if time.Now().After(deadline) {
			t.Fatalf("%s never began to wait", name)
		}
		time.Sleep(time.Millisecond)
	}
}

func need(uuid string, mib uint64) map[string]uint64 { return map[string]uint64{uuid: mib} }

// held is what q's admitted thaws hold.
func held(q *Queue) map[string]uint64 {
	h, _, resume := q.Pause()
	resume()
	return h
}

// TestWaitingThawsServedInTurn: when memory frees for one thaw at a time,
// the waiting thaws are admitted by priority, then round-robin between
// owners, then arrival, however many one owner has waiting.
func TestWaitingThawsServedInTurn(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 4096)
	q := newQueue(g, 0)
	out := make(chan outcome, 8)
	for _, n := range []string{"hog1", "hog2", "hog3", "hog4"} {
		arrive(t, q, n, Request{UID: 1001, Owner: "hog", Need: need("A", 500)}, time.Minute, out)
	}
	arrive(t, q, "victim", Request{UID: 1002, Owner: "victim", Need: need("A", 500)}, time.Minute, out)
	arrive(t, q, "urgent", Request{UID: 1003, Owner: "ops", Priority: 5, Need: need("A", 500)}, time.Minute, out)
	arrive(t, q, "victim2", Request{UID: 1002, Owner: "victim", Need: need("A", 500)}, time.Minute, out)

	var order []string
	for k := range 7 {
		g.set("A", 4096-700-uint64(k)*500) // 700 MiB free beside those admitted: room for one
		q.Sampled()
		o := <-out
		if o.err != nil {
			t.Fatalf("%s: %v", o.name, o.err)
		}
		order = append(order, o.name)
		select {
		case o := <-out:
			t.Fatalf("%s admitted beside %s with room for one", o.name, order[len(order)-1])
		default:
		}
	}
	want := "urgent hog1 victim hog2 victim2 hog3 hog4"
	if got := strings.Join(order, " "); got != want {
		t.Fatalf("admitted in the order %q, want %q", got, want)
	}
	if got := held(q)["A"]; got != 3500 {
		t.Fatalf("held %d MiB, want 3500", got)
	}
}

// TestSmallerThawsBackfillUntilTheHold: a waiting thaw that does not fit
// lets a later, smaller one through, until it has waited holdAfter; then
// no later thaw, waiting or arriving, is admitted on its GPU, while other
// GPUs stay open.
func TestSmallerThawsBackfillUntilTheHold(t *testing.T) {
	g := newGPUs("A", "B")
	g.set("A", 3000) // 1096 free
	q := newQueue(g, time.Hour)
	now := time.Unix(1_700_000_000, 0)
	q.now = func() time.Time { return now }
	out := make(chan outcome, 4)
	arrive(t, q, "big", Request{UID: 1001, Owner: "alice", Need: need("A", 2000)}, time.Minute, out)

	release, err := q.Admit(context.Background(), Request{UID: 1002, Owner: "bob", Need: need("A", 500)}, 0)
	if err != nil {
		t.Fatalf("a smaller thaw before the hold: %v", err)
	}
	release()

	now = now.Add(time.Hour)
	_, err = q.Admit(context.Background(), Request{UID: 1002, Owner: "bob", Need: need("A", 500)}, 0)
	var noRoom *NoRoom
	if !errors.As(err, &noRoom) || noRoom.Expired || !strings.Contains(err.Error(), "GPU 0 is held for a thaw of alice's waiting since") {
		t.Fatalf("a smaller thaw past the hold: %v, want it refused naming the hold", err)
	}
	if q.Fits(Request{UID: 1002, Need: need("A", 500)}) {
		t.Fatal("Fits says a held GPU has room")
	}
	if _, err := q.Admit(context.Background(), Request{UID: 1002, Owner: "bob", Need: need("B", 500)}, 0); err != nil {
		t.Fatalf("a thaw on another GPU: %v", err)
	}
	arrive(t, q, "small", Request{UID: 1003, Owner: "carol", Need: need("A", 500)}, time.Minute, out)
	g.set("A", 1500) // room for big (2000 + 100), then not for small
	q.Sampled()
	if o := <-out; o.name != "big" || o.err != nil {
		t.Fatalf("first admitted %s (%v), want big", o.name, o.err)
	}
	g.set("A", 0)
	q.Sampled()
	if o := <-out; o.name != "small" || o.err != nil {
		t.Fatalf("then %s (%v), want small", o.name, o.err)
	}
}

// TestThawsNotAdmitted: without a wait a thaw that does not fit is refused
// at once; with one it is refused once the wait is over or its caller
// hangs up; a GPU gone from the sample fails a waiting thaw. None leaves a
// reservation or a waiter behind.
func TestThawsNotAdmitted(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 4000)
	q := newQueue(g, 0)
	r := Request{UID: 1001, Owner: "alice", Need: need("A", 500)}
	var noRoom *NoRoom

	_, err := q.Admit(context.Background(), r, 0)
	if !errors.As(err, &noRoom) || noRoom.Expired || err.Error() != "GPU 0 needs 500 MiB plus a 100 MiB margin, 96 MiB free" {
		t.Fatalf("at once: %v", err)
	}
	_, err = q.Admit(context.Background(), r, 10*time.Millisecond)
	if !errors.As(err, &noRoom) || !noRoom.Expired {
		t.Fatalf("past its wait: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := q.Admit(ctx, r, time.Hour); errc <- err }()
	for q.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("caller gone: %v", err)
	}
	out := make(chan outcome, 1)
	arrive(t, q, "lost", r, time.Hour, out)
	g.mu.Lock()
	delete(g.total, "A")
	g.mu.Unlock()
	q.Sampled()
	var missing *Missing
	if o := <-out; !errors.As(o.err, &missing) || missing.UUID != "A" {
		t.Fatalf("GPU lost: %v", o.err)
	}
	if q.Waiting() != 0 || len(held(q)) != 0 {
		t.Fatalf("left behind: %d waiting, %v held", q.Waiting(), held(q))
	}
}

// TestAdmittedThawsHoldTheirMemory: an admitted thaw's memory counts until
// released (once, however often its release is called), so two thaws never
// count the same free memory; an owner's filler's yield counts as free to
// that owner alone.
func TestAdmittedThawsHoldTheirMemory(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 2000) // 2096 free
	g.yield[1002] = 1000
	q := newQueue(g, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var admitted []func()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if release, err := q.Admit(context.Background(), Request{UID: 1001, Need: need("A", 900)}, 0); err == nil {
				mu.Lock()
				admitted = append(admitted, release)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(admitted) != 2 || held(q)["A"] != 1800 {
		t.Fatalf("%d of 8 thaws of 900 MiB admitted into 2096 MiB, %d held; want 2", len(admitted), held(q)["A"])
	}
	if q.Fits(Request{UID: 1001, Need: need("A", 200)}) {
		t.Fatal("296 MiB free fits 200 plus a 100 margin")
	}
	if !q.Fits(Request{UID: 1002, Need: need("A", 1000)}) {
		t.Fatal("the owner's filler's 1000 MiB not counted as free")
	}
	admitted[0]()
	admitted[0]()
	if got := held(q)["A"]; got != 900 {
		t.Fatalf("after one release (called twice) %d MiB held, want 900", got)
	}
}

// TestOneWalkAlternatesOwners: memory freed for two at once goes to the
// first waiting thaw of each owner, not to one owner's first two.
func TestOneWalkAlternatesOwners(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 4096)
	q := newQueue(g, 0)
	out := make(chan outcome, 4)
	for _, n := range []string{"hog1", "hog2", "hog3"} {
		arrive(t, q, n, Request{UID: 1001, Owner: "hog", Need: need("A", 500)}, time.Minute, out)
	}
	arrive(t, q, "victim", Request{UID: 1002, Owner: "victim", Need: need("A", 500)}, time.Minute, out)
	g.set("A", 4096-1200) // room for two
	q.Sampled()
	got := map[string]bool{}
	for range 2 {
		o := <-out
		got[o.name] = o.err == nil
	}
	if !got["hog1"] || !got["victim"] || q.Waiting() != 2 {
		t.Fatalf("admitted %v with %d left waiting; want hog1 and victim", got, q.Waiting())
	}
}

// TestHeldMemoryIsNotFree: memory others hold and have not used yet (a
// lease's, a starting job's) is not free to a thaw, except the thawed
// process's own.
func TestHeldMemoryIsNotFree(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 1000)
	g.held["lease"] = 2000 // 1096 free beside it
	g.held["job"] = 500    // 596
	q := newQueue(g, 0)
	_, err := q.Admit(context.Background(), Request{UID: 1001, Proc: "p", Need: need("A", 1000)}, 0)
	if want := "GPU 0 needs 1000 MiB plus a 100 MiB margin, 596 MiB free (2500 MiB more is held by leases and jobs that have not used it yet)"; err == nil || err.Error() != want {
		t.Fatalf("a thaw into held memory: %v, want %q", err, want)
	}
	if _, err := q.Admit(context.Background(), Request{UID: 1001, Proc: "job", Need: need("A", 900)}, 0); err != nil {
		t.Fatalf("the job's own process's thaw into its own hold: %v", err)
	}
}

// TestGPUHeldForStarvingWork: a GPU placement holds for starving queued
// work admits no thaw, however free, and the refusal names what holds it.
func TestGPUHeldForStarvingWork(t *testing.T) {
	g := newGPUs("A", "B")
	g.saved["A"] = "starving job j1 (train of alice)"
	q := newQueue(g, 0)
	r := Request{UID: 1002, Owner: "bob", Need: need("A", 500)}
	_, err := q.Admit(context.Background(), r, 0)
	if want := "GPU 0 is held for starving job j1 (train of alice)"; err == nil || err.Error() != want {
		t.Fatalf("a thaw onto a GPU held for a starving job: %v, want %q", err, want)
	}
	if q.Fits(r) {
		t.Fatal("Fits says a GPU held for a starving job has room")
	}
	if _, err := q.Admit(context.Background(), Request{UID: 1002, Need: need("B", 500)}, 0); err != nil {
		t.Fatalf("a thaw onto another GPU: %v", err)
	}
}

// TestOwnersServedElsewhereGoLater: within a round, the owner the caller
// served last, with a thaw or with its other work (a job started), goes
// after the others, whoever asked first.
func TestOwnersServedElsewhereGoLater(t *testing.T) {
	g := newGPUs("A")
	g.set("A", 4096)
	q := newQueue(g, 0)
	q.served.Serve("alice") // a job of hers just started
	out := make(chan outcome, 2)
	arrive(t, q, "alice's", Request{UID: 1001, Owner: "alice", Need: need("A", 500)}, time.Minute, out)
	arrive(t, q, "bob's", Request{UID: 1002, Owner: "bob", Need: need("A", 500)}, time.Minute, out)
	g.set("A", 4096-700) // room for one
	q.Sampled()
	if o := <-out; o.name != "bob's" || o.err != nil {
		t.Fatalf("first admitted %s (%v), want bob's", o.name, o.err)
	}
}
