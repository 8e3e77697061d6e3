package limits

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// granted says whether w holds a place.
func granted(w *fairWaiter) bool {
	select {
	case <-w.granted:
		return true
	default:
		return false
	}
}

// TestFairServesTheFewFirst: one user's many requests queued first wait
// behind another user's one, which takes the next place that frees.
func TestFairServesTheFewFirst(t *testing.T) {
	const hostile, victim = 1001, 1002
	f := NewFair(2)
	if f.enqueue(hostile) != nil || f.enqueue(hostile) != nil {
		t.Fatal("the first two requests waited with two places free")
	}
	var queued []*fairWaiter
	for range 10 {
		queued = append(queued, f.enqueue(hostile))
	}
	v := f.enqueue(victim)
	if v == nil || f.Waiting() != 11 {
		t.Fatalf("with both places held: victim at once %v, %d waiting; want it and 10 more waiting", v == nil, f.Waiting())
	}
	f.releaser(hostile)()
	if !granted(v) || granted(queued[0]) {
		t.Fatalf("the freed place went to the victim: %v; the hostile's earliest waiting: %v", granted(v), granted(queued[0]))
	}
	// Both hold one now, the hostile one place: its earliest goes next.
	f.releaser(victim)()
	if !granted(queued[0]) || granted(queued[1]) {
		t.Fatal("with the victim gone, the hostile's requests go in their order")
	}
	if f.Held(hostile) != 2 || f.Held(victim) != 0 || f.Waiting() != 9 {
		t.Fatalf("held %d and %d, %d waiting; want 2, 0, 9", f.Held(hostile), f.Held(victim), f.Waiting())
	}
}

// TestFairSetPlaces: places added go at once to the requests waiting, in
// Fair's order; with places taken away, those given back go to no one
// until fewer are held than there are places.
func TestFairSetPlaces(t *testing.T) {
	const hostile, victim = 1001, 1002
	f := NewFair(1)
	f.enqueue(hostile)
	var queued []*fairWaiter
	for range 3 {
		queued = append(queued, f.enqueue(hostile))
	}
	v := f.enqueue(victim)
	f.SetPlaces(3)
	if !granted(v) || !granted(queued[0]) || granted(queued[1]) || f.Places() != 3 || f.Waiting() != 2 {
		t.Fatalf("grown to 3: victim %v, the hostile's first waiting %v, its second %v, %d places, %d waiting; want the victim and the hostile's first granted, 3 places, 2 waiting",
			granted(v), granted(queued[0]), granted(queued[1]), f.Places(), f.Waiting())
	}
	f.SetPlaces(1)
	f.releaser(victim)()
	f.releaser(hostile)()
	if granted(queued[1]) {
		t.Fatal("a place given back went on while as many were held as there are places")
	}
	f.releaser(hostile)()
	if !granted(queued[1]) || granted(queued[2]) || f.Held(hostile) != 1 {
		t.Fatalf("none held of one place: the next request granted %v, the one after %v, the hostile holds %d; want the next alone", granted(queued[1]), granted(queued[2]), f.Held(hostile))
	}
	if f.SetPlaces(0); f.Places() != 1 {
		t.Errorf("SetPlaces(0) left %d places; want 1", f.Places())
	}
}

// TestFairTiesGoToTheLongestWaiting: between users holding as many
// places, the request that has waited longest goes first.
func TestFairTiesGoToTheLongestWaiting(t *testing.T) {
	f := NewFair(1)
	f.enqueue(7)
	b := f.enqueue(8)
	a := f.enqueue(9)
	f.releaser(7)()
	if !granted(b) || granted(a) {
		t.Fatal("user 8 waited longer than user 9 and both hold nothing: 8 goes first")
	}
}

// TestFairTakeEndsWithItsContext: a request given up on leaves the queue,
// and a place handed back goes to the request waiting next.
func TestFairTakeEndsWithItsContext(t *testing.T) {
	f := NewFair(1)
	release, err := f.Take(context.Background(), 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Take(ctx, 2, 0, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take with its context ended and no place free: %v", err)
	}
	if f.Waiting() != 0 {
		t.Fatalf("%d waiting after the only waiter gave up", f.Waiting())
	}
	w := f.enqueue(3)
	release()
	release() // once only
	if !granted(w) || f.Held(3) != 1 || f.Held(1) != 0 {
		t.Fatalf("the freed place: granted %v, held %d", granted(w), f.Held(3))
	}
	// Handed back, as Take does for a place granted just as its context
	// ended (TestFairGrantedAsItsContextEnds): it goes to the next.
	next := f.enqueue(4)
	f.mu.Lock()
	f.put(3)
	f.mu.Unlock()
	if !granted(next) || f.Held(4) != 1 {
		t.Fatal("a place handed back went to nobody")
	}
}

// TestFairOnePlaceAlternates: with one place, a user whose requests
// queued first and another who queued one after them take turns: each
// freed place goes to the user served less recently.
func TestFairOnePlaceAlternates(t *testing.T) {
	const hostile, victim = 1001, 1002
	f := NewFair(1)
	f.enqueue(hostile)
	h1, h2 := f.enqueue(hostile), f.enqueue(hostile)
	v := f.enqueue(victim)
	f.releaser(hostile)()
	if !granted(v) || granted(h1) {
		t.Fatal("the hostile was just served and both hold nothing: the victim's request goes next")
	}
	f.releaser(victim)()
	if !granted(h1) || granted(h2) {
		t.Fatal("with the victim's one request served, the hostile's go on in their order")
	}
}

// TestFairOverdueMayFreeAPlace: a request that waits is called back each
// patience it waits, and takes the place its callback frees.
func TestFairOverdueMayFreeAPlace(t *testing.T) {
	f := NewFair(1)
	hold, err := f.Take(context.Background(), 1, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	release, err := f.Take(context.Background(), 2, time.Millisecond, func() {
		if calls++; calls == 3 {
			hold() // as the router cuts the hog's request
		}
	})
	if err != nil || calls != 3 || f.Held(2) != 1 {
		t.Fatalf("Take: %v after %d calls, user 2 holding %d; want the place after the third", err, calls, f.Held(2))
	}
	release()
}

// TestFairGrantedAsItsContextEnds: a request granted a place just as its
// context ends, and returning the context's error, hands the place on
// rather than keep it. Its callback frees the place and ends the context
// at once; Take then finds both ready and takes either at random, so 64
// rounds take the error path all but surely.
func TestFairGrantedAsItsContextEnds(t *testing.T) {
	gaveUp := 0
	for range 64 {
		f := NewFair(1)
		hold, _ := f.Take(context.Background(), 1, 0, nil)
		ctx, cancel := context.WithCancel(context.Background())
		release, err := f.Take(ctx, 2, time.Nanosecond, func() {
			hold()
			cancel()
		})
		if err == nil {
			release()
		} else {
			gaveUp++
		}
		if f.Held(2) != 0 || f.inUse != 0 || f.waiting != 0 {
			t.Fatalf("after Take's %v: user 2 holds %d, %d held, %d waiting; want nothing", err, f.Held(2), f.inUse, f.waiting)
		}
	}
	if gaveUp == 0 {
		t.Log("no round took the context's error path")
	}
}

// TestFairConcurrent: many requests of several users taking, giving up
// on (their context ended, granted or not) and giving back places at once
// never hold more than n, and leave nothing behind.
func TestFairConcurrent(t *testing.T) {
	const n = 3
	f := NewFair(n)
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%3 == 0 {
					go cancel() // gives up while waiting, or races its grant
				}
				release, err := f.Take(ctx, uint32(g%8), 0, nil)
				if err == nil {
					now := holding.Add(1)
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					runtime.Gosched()
					holding.Add(-1)
					release()
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	if most.Load() > n {
		t.Errorf("%d held at once; at most %d", most.Load(), n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inUse != 0 || f.waiting != 0 || len(f.users) != 0 {
		t.Errorf("left behind: %d held, %d waiting, %d users", f.inUse, f.waiting, len(f.users))
	}
}

// TestFairProperties drives random arrivals, releases and requests given
// up on among four users and checks, at every step: no more than n
// places held, nobody waiting while one is free, each freed place given
// to a waiting user holding the fewest, each user's requests granted in
// their order, and, while a user who holds nothing waits, no other user
// given more than one place.
func TestFairProperties(t *testing.T) {
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 1))
		n := 1 + rng.IntN(4)
		f := NewFair(n)
		var holders []uint32
		var waiters []*fairWaiter
		held := map[uint32]int{}
		// givenWhileStarved[u][v]: places v was given while u held
		// nothing and waited.
		givenWhileStarved := map[uint32]map[uint32]int{}
		for step := range 400 {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("seed %d step %d (n %d): %s", seed, step, n, fmt.Sprintf(format, args...))
			}
			switch op := rng.IntN(10); {
			case op < 5 || len(holders) == 0:
				uid := uint32(rng.IntN(4))
				if w := f.enqueue(uid); w == nil {
					holders = append(holders, uid)
					held[uid]++
				} else {
					waiters = append(waiters, w)
					if held[uid] == 0 && givenWhileStarved[uid] == nil {
						givenWhileStarved[uid] = map[uint32]int{}
					}
				}
			case op < 6 && len(waiters) > 0: // a request given up on
				i := rng.IntN(len(waiters))
				w := waiters[i]
				waiters = append(waiters[:i], waiters[i+1:]...)
				f.mu.Lock()
				f.drop(w)
				f.mu.Unlock()
				if !waits(waiters, w.uid) {
					delete(givenWhileStarved, w.uid)
				}
			default:
				i := rng.IntN(len(holders))
				uid := holders[i]
				holders = append(holders[:i], holders[i+1:]...)
				held[uid]--
				f.releaser(uid)()
				if held[uid] == 0 && waits(waiters, uid) && givenWhileStarved[uid] == nil {
					givenWhileStarved[uid] = map[uint32]int{}
				}
				fewest := -1
				for _, w := range waiters {
					if fewest < 0 || held[w.uid] < fewest {
						fewest = held[w.uid]
					}
				}
				for j, w := range waiters {
					if !granted(w) {
						continue
					}
					if held[w.uid] != fewest {
						fail("the place went to user %d holding %d; another waiting user held %d", w.uid, held[w.uid], fewest)
					}
					for _, o := range waiters[:j] {
						if o.uid == w.uid {
							fail("user %d's later request was granted before its earlier one", w.uid)
						}
					}
					for u, given := range givenWhileStarved {
						if u == w.uid {
							continue
						}
						if given[w.uid]++; given[w.uid] > 1 {
							fail("user %d was given %d places while user %d held none and waited", w.uid, given[w.uid], u)
						}
					}
					delete(givenWhileStarved, w.uid)
					holders = append(holders, w.uid)
					held[w.uid]++
					waiters = append(waiters[:j], waiters[j+1:]...)
					break
				}
			}
			if len(holders) > n || f.inUse != len(holders) || len(waiters) > 0 && len(holders) < n || f.waiting != len(waiters) {
				fail("%d held (counted %d), %d waiting (counted %d)", len(holders), f.inUse, len(waiters), f.waiting)
			}
		}
	}
}

// waits says whether uid has a request among waiters.
func waits(waiters []*fairWaiter, uid uint32) bool {
	for _, w := range waiters {
		if w.uid == uid {
			return true
		}
	}
	return false
}

// BenchmarkFairTake is a place taken and given back, with none waiting
// (the router's path while a model's slots are not all busy) and with 64
// requests of 8 users waiting (each hand-over picks among them).
func BenchmarkFairTake(b *testing.B) {
	b.Run("free", func(b *testing.B) {
		f := NewFair(4)
		for range b.N {
			release, _ := f.Take(context.Background(), 1, 0, nil)
			release()
		}
	})
	b.Run("64-waiting", func(b *testing.B) {
		f := NewFair(1)
		f.enqueue(0)
		for i := range 64 {
			f.enqueue(uint32(i % 8))
		}
		holder := uint32(0)
		for range b.N {
			f.mu.Lock()
			f.put(holder) // hands the place to the next waiter
			f.mu.Unlock()
			for uid, u := range f.users {
				if u.held == 1 {
					holder = uid
				}
			}
			f.enqueue(holder) // and it queues again
		}
	})
}
