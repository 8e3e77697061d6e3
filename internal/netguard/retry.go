package netguard

import (
	"sync"
	"time"
)

// Accept loops back off from MinDelay, doubling to MaxDelay.
const (
	MinDelay = 5 * time.Millisecond
	MaxDelay = time.Second
)

// Retry paces an accept loop through errors: each failure waits twice as
// long as the one before (MinDelay to MaxDelay) and a success starts over.
// The first failure after a success, and only that one, is logged: a run
// of failures is one episode, one line. It is safe for concurrent use.
type Retry struct {
	log   func(err error)
	sleep func(d time.Duration, stop <-chan struct{}) bool

	mu    sync.Mutex
	delay time.Duration // the next wait; 0 while accepts succeed
}

// NewRetry logs the first error of each episode with log.
func NewRetry(log func(err error)) *Retry {
	return &Retry{log: log, sleep: sleep}
}

// Failed records a failed accept: it logs err when it begins an episode and
// waits before the caller's next attempt. It returns false, at once, when
// stop is closed first (the listener is closing).
func (r *Retry) Failed(err error, stop <-chan struct{}) bool {
	r.mu.Lock()
	first := r.delay == 0
	d := max(r.delay, MinDelay)
	r.delay = min(2*d, MaxDelay)
	r.mu.Unlock()
	if first {
		r.log(err)
	}
	return r.sleep(d, stop)
}

// Succeeded records an accepted connection: the episode, if any, is over.
func (r *Retry) Succeeded() {
	r.mu.Lock()
	r.delay = 0
	r.mu.Unlock()
}

// sleep waits d, or until stop is closed (false).
func sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	}
}
