package bulkgate

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"
)

// ledger is a Budget that records charges; Wait blocks while hold is set.
type ledger struct {
	mu      sync.Mutex
	charged map[uint32][]time.Duration
	hold    chan struct{} // non-nil: Wait blocks until it is closed
	held    chan uint32   // each user Wait blocks
}

func (l *ledger) Wait(ctx context.Context, uid uint32) error {
	l.mu.Lock()
	h := l.hold
	l.mu.Unlock()
	if h == nil {
		return nil
	}
	l.held <- uid
	select {
	case <-h:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *ledger) Within(uid uint32) bool { return true }

func (l *ledger) Charge(uid uint32, cpu time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.charged[uid] = append(l.charged[uid], cpu)
}

// spin computes until the calling thread has used d more CPU.
func spin(d time.Duration) {
	for end := threadCPU() + d; threadCPU() < end; {
	}
}

// TestMeteredGateChargesEachChunk: each chunk of a slot's work, up to a
// yield and up to the leave, is charged at least the CPU it used. The test
// keeps to one thread, so that spin's measure is the chunk's.
func TestMeteredGateChargesEachChunk(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	l := &ledger{charged: map[uint32][]time.Duration{}}
	g := New(1).Metered(l)
	s, err := g.Enter(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	spin(30 * time.Millisecond)
	if err := s.Yield(context.Background()); err != nil {
		t.Fatal(err)
	}
	spin(20 * time.Millisecond)
	s.Leave()
	s.Leave() // charges nothing more
	got := l.charged[1000]
	if len(got) != 2 || got[0] < 30*time.Millisecond || got[1] < 20*time.Millisecond {
		t.Fatalf("charged %v; want two chunks, of at least 30 and 20 ms", got)
	}
}

// TestMeteredGateWaitsForBudgetFirst: a user over budget waits before
// queueing, so it holds no place in line meanwhile and another user is
// admitted; its Enter ends with ctx.
func TestMeteredGateWaitsForBudgetFirst(t *testing.T) {
	l := &ledger{charged: map[uint32][]time.Duration{}, hold: make(chan struct{}), held: make(chan uint32, 1)}
	g := New(1).Metered(l)
	ctx, cancel := context.WithCancel(context.Background())
	over := enter(t, ctx, g, 1000)
	select {
	case <-l.held:
	case <-time.After(10 * time.Second):
		t.Fatal("Enter did not wait for the budget")
	}
	notAdmitted(t, over, "a user over budget")
	if g.Waiting() != 0 || g.free != 1 {
		t.Fatalf("waiting %d, free %d while a user waits for budget; want it out of line", g.Waiting(), g.free)
	}
	cancel()
	if _, ok := <-over; ok {
		t.Fatal("admitted after its ctx ended")
	}
	close(l.hold)
	admitted(t, enter(t, context.Background(), g, 1001), "a user within budget").Leave()
}

// TestMeterChargesCPUWithoutASlot: Meter waits for the user's budget,
// takes no slot (another user's work is admitted meanwhile), and charges
// the CPU the caller used, not the time it waited; a user over budget
// waits in it until ctx ends.
func TestMeterChargesCPUWithoutASlot(t *testing.T) {
	l := &ledger{charged: map[uint32][]time.Duration{}}
	g := New(1).Metered(l)
	charge, err := g.Meter(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	admitted(t, enter(t, context.Background(), g, 1001), "another user while one is metered").Leave()
	spin(25 * time.Millisecond)
	waited := make(chan struct{})
	time.AfterFunc(200*time.Millisecond, func() { close(waited) })
	<-waited // a wait, as on a child: the goroutine parks
	charge()
	if got := l.charged[1000]; len(got) != 1 || got[0] < 25*time.Millisecond || got[0] >= 200*time.Millisecond {
		t.Fatalf("charged %v; want one charge of the 25 ms computed, not the 200 ms waited", got)
	}

	l.mu.Lock()
	l.hold, l.held = make(chan struct{}), make(chan uint32, 1)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Meter(ctx, 1000); err == nil {
		t.Fatal("Meter returned for a user over budget")
	}
	if uid := <-l.held; uid != 1000 {
		t.Fatalf("waited for uid %d's budget", uid)
	}
}

// TestChargeDoesNotWaitForTheBudget: work done because of a user's
// process (its exit recorded) is charged to the user even while they are
// over their budget, and never waits for it.
func TestChargeDoesNotWaitForTheBudget(t *testing.T) {
	l := &ledger{charged: map[uint32][]time.Duration{}, hold: make(chan struct{}), held: make(chan uint32, 1)}
	g := New(1).Metered(l)
	done := make(chan struct{})
	go func() {
		charge := g.Charge(1000)
		spin(25 * time.Millisecond)
		charge()
		close(done)
	}()
	select {
	case uid := <-l.held:
		t.Fatalf("Charge waited for uid %d's budget", uid)
	case <-done:
	}
	if got := l.charged[1000]; len(got) != 1 || got[0] < 25*time.Millisecond {
		t.Fatalf("charged %v; want one charge of the 25 ms computed", got)
	}
}
