package bulkgate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// enter starts g.Enter(uid) in a goroutine; its slot comes on the channel
// once admitted.
func enter(t *testing.T, ctx context.Context, g *Gate, uid uint32) <-chan *Slot {
	t.Helper()
	ch := make(chan *Slot, 1)
	go func() {
		s, err := g.Enter(ctx, uid)
		if err != nil {
			close(ch)
			return
		}
		ch <- s
	}()
	return ch
}

// queued waits until n waiters are queued at g.
func queued(t *testing.T, g *Gate, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); g.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued, want %d", g.Waiting(), n)
		}
	}
}

func admitted(t *testing.T, ch <-chan *Slot, what string) *Slot {
	t.Helper()
	select {
	case s, ok := <-ch:
		if !ok {
			t.Fatalf("%s: refused", what)
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not admitted", what)
	}
	return nil
}

func notAdmitted(t *testing.T, ch <-chan *Slot, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("%s: admitted while every slot is held", what)
	default:
	}
}

func TestGateAdmitsAtMostNAtOnce(t *testing.T) {
	ctx := context.Background()
	g := New(2)
	a, b := admitted(t, enter(t, ctx, g, 1), "first"), admitted(t, enter(t, ctx, g, 1), "second")
	third := enter(t, ctx, g, 2)
	queued(t, g, 1)
	notAdmitted(t, third, "third")
	a.Leave()
	a.Leave() // a second Leave gives back nothing more
	c := admitted(t, third, "third, a slot given back")
	fourth := enter(t, ctx, g, 3)
	queued(t, g, 1)
	notAdmitted(t, fourth, "fourth")
	b.Leave()
	admitted(t, fourth, "fourth").Leave()
	c.Leave()
	if g.free != 2 {
		t.Fatalf("free slots %d after all left, want 2", g.free)
	}
}

// TestGateVictimAheadOfAFlood: one user holds the only slot and has many
// more requests waiting; another user's request is admitted at the
// holder's next yield, not after the flood.
func TestGateVictimAheadOfAFlood(t *testing.T) {
	ctx := context.Background()
	g := New(1)
	const hostile, victim = 1000, 1001
	holder := admitted(t, enter(t, ctx, g, hostile), "holder")
	var flood []<-chan *Slot
	for range 5 {
		flood = append(flood, enter(t, ctx, g, hostile))
		queued(t, g, len(flood))
	}
	v := enter(t, ctx, g, victim)
	queued(t, g, len(flood)+1)
	// The holder's chunk ends; the slot goes to the flood's oldest (it
	// was first in line), then the victim's, not the rest of the flood.
	yielded := make(chan error, 1)
	go func() { yielded <- holder.Yield(ctx) }()
	first := admitted(t, flood[0], "the flood's oldest")
	first.Leave()
	vs := admitted(t, v, "the victim, with the rest of the flood waiting")
	for i, ch := range flood[1:] {
		notAdmitted(t, ch, "flood "+string(rune('1'+i)))
	}
	vs.Leave()
	// The rest of the flood and the yielded holder take turns in order.
	for i, ch := range flood[1:] {
		admitted(t, ch, "flood "+string(rune('1'+i))).Leave()
	}
	if err := <-yielded; err != nil {
		t.Fatal(err)
	}
	holder.Leave()
}

func TestGateYieldWithNobodyWaitingKeepsTheSlot(t *testing.T) {
	g := New(1)
	s, err := g.Enter(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Yield(context.Background()); err != nil {
		t.Fatal(err)
	}
	if g.free != 0 {
		t.Fatalf("free slots %d while held, want 0", g.free)
	}
	s.Leave()
	if g.free != 1 {
		t.Fatalf("free slots %d after Leave, want 1", g.free)
	}
}

// TestGateCancelledWaiterLeavesTheLine: a waiter whose ctx ends is taken
// out of the line, and the slot goes to the next.
func TestGateCancelledWaiterLeavesTheLine(t *testing.T) {
	g := New(1)
	holder, _ := g.Enter(context.Background(), 1)
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { _, err := g.Enter(ctx, 2); gone <- err }()
	queued(t, g, 1)
	next := enter(t, context.Background(), g, 3)
	queued(t, g, 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Enter: %v, want context.Canceled", err)
	}
	queued(t, g, 1)
	holder.Leave()
	admitted(t, next, "the waiter behind the cancelled one").Leave()
	if g.free != 1 || len(g.order) != 0 {
		t.Fatalf("free %d, order %v after all left", g.free, g.order)
	}
}

// TestGateYieldCancelled: a holder whose ctx ends while it waits to get
// its slot back after a yield has left; its Leave gives nothing back twice.
func TestGateYieldCancelled(t *testing.T) {
	g := New(1)
	holder, _ := g.Enter(context.Background(), 1)
	other := enter(t, context.Background(), g, 2)
	queued(t, g, 1)
	ctx, cancel := context.WithCancel(context.Background())
	yielded := make(chan error, 1)
	go func() { yielded <- holder.Yield(ctx) }()
	o := admitted(t, other, "the other user, at the yield")
	queued(t, g, 1) // the holder, waiting to get it back
	cancel()
	if err := <-yielded; !errors.Is(err, context.Canceled) {
		t.Fatalf("Yield: %v, want context.Canceled", err)
	}
	holder.Leave()
	o.Leave()
	if g.free != 1 {
		t.Fatalf("free slots %d after all left, want 1", g.free)
	}
}
