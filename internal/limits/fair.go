package limits

import (
	"context"
	"sync"
	"time"
)

// Fair lets at most n requests through at once (a model server's slots)
// and shares them between users: while requests wait, each place that
// frees goes to the waiting user who holds the fewest places then, and
// between users who hold as many, to the one served least recently (the
// one whose request has waited longest, between users never served); a
// user's own requests go in their order. One user's hundred requests
// then wait behind another's one rather than ahead of it, which a
// server's own first-come queue cannot do: while a user who holds no
// place waits, no other user is given more than one. AnyPeer counts as
// one user. Fair remembers when it last served each user: a number per
// local user that ever sent it a request.
type Fair struct {
	n       int
	mu      sync.Mutex
	users   map[uint32]*fairUser // those holding or waiting for a place
	served  map[uint32]uint64    // when each user was last given a place (grants)
	inUse   int                  // places held, all users together
	waiting int                  // requests waiting, all users together
	grants  uint64               // places given so far: the order of service
	arrived uint64               // requests queued so far: the order of arrival
}

// fairUser is one user's places and waiting requests.
type fairUser struct {
	uid   uint32
	held  int
	queue []*fairWaiter // in arrival order
}

// fairWaiter is one request waiting for a place.
type fairWaiter struct {
	uid     uint32
	seq     uint64        // arrival order
	granted chan struct{} // closed once it holds a place
}

// NewFair shares n places (at least 1).
func NewFair(n int) *Fair {
	return &Fair{n: max(n, 1), users: map[uint32]*fairUser{}, served: map[uint32]uint64{}}
}

// Take waits for a place for uid and returns the function that gives it
// back (once), or ctx's error when ctx ends first. Each time the request
// has waited another patience, overdue is called (never where it is nil
// or patience is not positive), from Take's goroutine: it may make a
// place free, such as by ending one.
func (f *Fair) Take(ctx context.Context, uid uint32, patience time.Duration, overdue func()) (release func(), err error) {
	w := f.enqueue(uid)
	if w == nil {
		return f.releaser(uid), nil
	}
	var tick <-chan time.Time
	if overdue != nil && patience > 0 {
		t := time.NewTicker(patience)
		defer t.Stop()
		tick = t.C
	}
	for done := false; !done; {
		select {
		case <-w.granted:
			return f.releaser(uid), nil
		case <-tick:
			overdue()
		case <-ctx.Done():
			done = true
		}
	}
	f.mu.Lock()
	select {
	case <-w.granted: // granted as ctx ended: hand it on
		f.put(uid)
	default:
		f.drop(w)
	}
	f.mu.Unlock()
	return nil, ctx.Err()
}

// enqueue gives uid a place at once (nil) where one is free and nobody
// waits, else queues a request for one.
func (f *Fair) enqueue(uid uint32) *fairWaiter {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.user(uid)
	if f.waiting == 0 && f.inUse < f.n {
		f.grant(u)
		return nil
	}
	f.arrived++
	w := &fairWaiter{uid: uid, seq: f.arrived, granted: make(chan struct{})}
	u.queue = append(u.queue, w)
	f.waiting++
	return w
}

// Held is how many places uid holds.
func (f *Fair) Held(uid uint32) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u := f.users[uid]; u != nil {
		return u.held
	}
	return 0
}

// SetPlaces makes n places (at least 1): more are given at once to the
// requests waiting, in Fair's order; with fewer, places given back go to
// no one until fewer than n are held.
func (f *Fair) SetPlaces(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n = max(n, 1)
	f.handOn()
}

// Places is how many places there are.
func (f *Fair) Places() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// Waiting is how many requests wait for a place.
func (f *Fair) Waiting() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting
}

func (f *Fair) releaser(uid uint32) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.put(uid)
			f.mu.Unlock()
		})
	}
}

// user is uid's entry, made where it has none; callers hold f.mu.
func (f *Fair) user(uid uint32) *fairUser {
	u := f.users[uid]
	if u == nil {
		u = &fairUser{uid: uid}
		f.users[uid] = u
	}
	return u
}

// grant gives u a place; callers hold f.mu.
func (f *Fair) grant(u *fairUser) {
	u.held++
	f.inUse++
	f.grants++
	f.served[u.uid] = f.grants
}

// put takes uid's place back and passes it on; callers hold f.mu.
func (f *Fair) put(uid uint32) {
	u := f.users[uid]
	u.held--
	f.inUse--
	f.forgetIdle(uid, u)
	f.handOn()
}

// handOn gives the free places to the requests waiting for them, in
// order; callers hold f.mu.
func (f *Fair) handOn() {
	for f.inUse < f.n {
		next := f.next()
		if next == nil {
			return
		}
		w := next.queue[0]
		f.grant(next) // first: drop forgets a user who holds nothing
		f.drop(w)
		close(w.granted)
	}
}

// next is the waiting user the next free place goes to, or nil; callers
// hold f.mu.
func (f *Fair) next() *fairUser {
	var best *fairUser
	for _, u := range f.users {
		if len(u.queue) > 0 && (best == nil || f.before(u, best)) {
			best = u
		}
	}
	return best
}

// before says whether waiting user a comes before b: fewer places held,
// else served less recently, else waiting longer; callers hold f.mu.
func (f *Fair) before(a, b *fairUser) bool {
	if a.held != b.held {
		return a.held < b.held
	}
	if la, lb := f.served[a.uid], f.served[b.uid]; la != lb {
		return la < lb
	}
	return a.queue[0].seq < b.queue[0].seq
}

// drop removes a waiting request; callers hold f.mu.
func (f *Fair) drop(w *fairWaiter) {
	u := f.users[w.uid]
	for i, x := range u.queue {
		if x == w {
			u.queue = append(u.queue[:i], u.queue[i+1:]...)
			break
		}
	}
	f.waiting--
	f.forgetIdle(w.uid, u)
}

// forgetIdle drops a user who neither holds nor waits; callers hold f.mu.
func (f *Fair) forgetIdle(uid uint32, u *fairUser) {
	if u.held == 0 && len(u.queue) == 0 {
		delete(f.users, uid)
	}
}
