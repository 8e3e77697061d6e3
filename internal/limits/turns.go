package limits

import (
	"context"
	"sync"
)

// Turns lets each non-root user have at most n calls being answered at
// once; the others wait their turn. It keeps one user's stream of costly
// requests (long lists, every line of a log) to a share of the daemon's
// CPUs, so that another user's request finds one free. Root never waits.
type Turns struct {
	n    int
	mu   sync.Mutex
	busy map[uint32]chan struct{}
}

// NewTurns gives each non-root user n turns at once (at least 1).
func NewTurns(n int) *Turns { return &Turns{n: max(n, 1), busy: map[uint32]chan struct{}{}} }

// Take waits for one of uid's turns and returns the function that gives it
// back (once), or ctx's error when ctx ends first.
func (t *Turns) Take(ctx context.Context, uid uint32) (release func(), err error) {
	if uid == Root {
		return func() {}, nil
	}
	t.mu.Lock()
	ch := t.busy[uid]
	if ch == nil {
		ch = make(chan struct{}, t.n) // kept: one per user who ever called
		t.busy[uid] = ch
	}
	t.mu.Unlock()
	select {
	case ch <- struct{}{}: // a free turn is taken whatever ctx says
	default:
		select {
		case ch <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() { once.Do(func() { <-ch }) }, nil
}
