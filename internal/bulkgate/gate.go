package bulkgate

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Gate admits bulk work to a fixed number of slots, taking waiting users
// in turn (round robin) and each user's waiters in order.
type Gate struct {
	mu    sync.Mutex
	free  int
	queue map[uint32][]*waiter // each user's waiters, oldest first
	order []uint32             // the users with waiters, next served first
	wait  int                  // waiters in queue

	budget Budget // nil: none
}

type waiter struct {
	ready   chan struct{} // closed once granted
	granted bool
}

// New is a gate of n slots (at least 1).
func New(n int) *Gate { return &Gate{free: max(n, 1), queue: map[uint32][]*waiter{}} }

// ForProcs is a gate that leaves one of the runtime's Ps (GOMAXPROCS) to
// quick work: GOMAXPROCS-1 slots, and 1 on a single P.
func ForProcs() *Gate { return New(runtime.GOMAXPROCS(0) - 1) }

// Metered makes g hold users to b: a user waits for b before queueing, and
// each chunk of their work is charged to b. It returns g.
func (g *Gate) Metered(b Budget) *Gate {
	g.budget = b
	return g
}

// Slot is one admission; its holder calls Yield between chunks and Leave
// when done.
type Slot struct {
	g     *Gate
	uid   uint32
	left  bool
	chunk chunkStart // the current chunk's start, where g is metered
}

// Await waits until uid is within the gate's budget (Metered), or returns
// ctx's error when ctx ends first; at once on a gate with none. A caller
// awaits before it takes what others wait for, such as the user's turn.
func (g *Gate) Await(ctx context.Context, uid uint32) error {
	if g.budget == nil {
		return nil
	}
	return g.budget.Wait(ctx, uid)
}

// Within reports whether uid is within the gate's budget now (always, on a
// gate with none).
func (g *Gate) Within(uid uint32) bool { return g.budget == nil || g.budget.Within(uid) }

// Meter waits until uid is within the gate's budget, as Await does, and
// returns the function that charges uid the CPU the calling goroutine uses
// until it calls it: for work held to the user's budget that takes no
// slot, as a process start, which waits on its child more than it
// computes. The goroutine is kept on its thread (runtime.LockOSThread)
// until then, so that what is charged is the thread's CPU time, not the
// waits; charge must be called on the same goroutine.
func (g *Gate) Meter(ctx context.Context, uid uint32) (charge func(), err error) {
	if err := g.Await(ctx, uid); err != nil {
		return nil, err
	}
	return g.Charge(uid), nil
}

// Charge returns the function that charges uid the CPU the calling
// goroutine uses until it calls it, as Meter's does, without waiting for
// uid's budget: for the daemon's work that follows from what uid's
// processes did and may not wait (their exits recorded), paid for by uid's
// next work held to the budget.
func (g *Gate) Charge(uid uint32) (charge func()) {
	if g.budget == nil {
		return func() {}
	}
	runtime.LockOSThread()
	c := startChunk()
	return func() {
		g.budget.Charge(uid, c.took())
		runtime.UnlockOSThread()
	}
}

// Enter waits for a slot for uid's work, or returns ctx's error when ctx
// ends first. A free slot goes to the caller only while nobody waits. On a
// ChargeCPU charges uid cpu measured elsewhere, without waiting: what a
// process the daemon started for uid spent, which the thread's CPU time
// does not see.
func (g *Gate) ChargeCPU(uid uint32, cpu time.Duration) {
	if g.budget != nil {
		g.budget.Charge(uid, cpu)
	}
}

// metered gate the caller first awaits its user's budget.
func (g *Gate) Enter(ctx context.Context, uid uint32) (*Slot, error) {
	if err := g.Await(ctx, uid); err != nil {
		return nil, err
	}
	s := &Slot{g: g, uid: uid}
	g.mu.Lock()
	if g.free > 0 && len(g.order) == 0 {
		g.free--
		g.mu.Unlock()
		s.begin()
		return s, nil
	}
	w := g.enqueue(uid)
	g.mu.Unlock()
	if err := g.await(ctx, uid, w); err != nil {
		s.left = true
		return nil, err
	}
	s.begin()
	return s, nil
}

// begin starts a chunk of the slot's work.
func (s *Slot) begin() {
	if s.g.budget != nil {
		s.chunk = startChunk()
	}
}

// end charges the chunk that ends.
func (s *Slot) end() {
	if s.g.budget != nil {
		s.g.budget.Charge(s.uid, s.chunk.took())
	}
}

// Yield ends a chunk: the goroutine gives its P to what is runnable, and
// its slot to the next waiter if there is one, waiting to get one back. On
// ctx's end it returns ctx's error, the slot left.
func (s *Slot) Yield(ctx context.Context) error {
	s.end()
	runtime.Gosched()
	g := s.g
	g.mu.Lock()
	if len(g.order) == 0 {
		g.mu.Unlock()
		s.begin()
		return nil
	}
	g.grantNext()
	w := g.enqueue(s.uid)
	g.mu.Unlock()
	if err := g.await(ctx, s.uid, w); err != nil {
		s.left = true
		return err
	}
	s.begin()
	return nil
}

// Leave gives the slot back; later calls do nothing.
func (s *Slot) Leave() {
	if s.left {
		return
	}
	s.left = true
	s.end()
	s.g.mu.Lock()
	s.g.grantNext()
	s.g.mu.Unlock()
}

// Waiting is how many wait for a slot.
func (g *Gate) Waiting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.wait
}

// enqueue adds a waiter for uid; under mu.
func (g *Gate) enqueue(uid uint32) *waiter {
	w := &waiter{ready: make(chan struct{})}
	if len(g.queue[uid]) == 0 {
		g.order = append(g.order, uid)
	}
	g.queue[uid] = append(g.queue[uid], w)
	g.wait++
	return w
}

// grantNext hands a slot given back to the next user's oldest waiter, or
// frees it; under mu.
func (g *Gate) grantNext() {
	if len(g.order) == 0 {
		g.free++
		return
	}
	uid := g.order[0]
	g.order = g.order[1:]
	ws := g.queue[uid]
	w := ws[0]
	if len(ws) > 1 {
		g.queue[uid] = ws[1:]
		g.order = append(g.order, uid) // its next waiter goes behind the other users'
	} else {
		delete(g.queue, uid)
	}
	g.wait--
	w.granted = true
	close(w.ready)
}

// await waits for w's grant; when ctx ends first it withdraws w, or passes
// on the slot granted meanwhile.
func (g *Gate) await(ctx context.Context, uid uint32, w *waiter) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		g.grantNext()
		return ctx.Err()
	}
	g.wait--
	ws := g.queue[uid]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) > 0 {
		g.queue[uid] = ws
		return ctx.Err()
	}
	delete(g.queue, uid)
	for i, u := range g.order {
		if u == uid {
			g.order = append(g.order[:i:i], g.order[i+1:]...)
			break
		}
	}
	return ctx.Err()
}
