package activate

import (
	"context"
	"sync"
)

// state is what activations remember between calls, for the daemon's
// life only: when each process was last active, which are held, and which
// owners have an activation in progress. Processes are known by record
// id, unique among all users' and never reused: a name taken again by a
// new process starts afresh.
type state struct {
	mu     sync.Mutex
	tick   uint64
	last   map[string]uint64 // by record id
	held   map[string]uint64 // by record id: the number of holds
	owners map[uint32]chan struct{}
}

func newState() *state {
	return &state{last: map[string]uint64{}, held: map[string]uint64{}, owners: map[uint32]chan struct{}{}}
}

// touch marks the process (record id) as active now.
func (s *state) touch(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick++
	s.last[id] = s.tick
}

// forget drops what is known of a record that is gone.
func (s *state) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, id)
	delete(s.held, id)
}

// lastActive is when the process was last active: 0 for never.
func (s *state) lastActive(id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last[id]
}

// isHeld reports whether the process is held.
func (s *state) isHeld(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[id] > 0
}

// hold counts one more hold of the process; the returned func, safe to
// call more than once, ends it and marks the process active.
func (s *state) hold(id string) func() {
	s.mu.Lock()
	s.held[id]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.held[id] <= 1 {
				delete(s.held, id)
			} else {
				s.held[id]--
			}
			s.mu.Unlock()
			s.touch(id)
		})
	}
}

// lockOwner waits until no other activation of uid's processes is in
// progress, or ctx ends; the returned func lets the next one in.
func (s *state) lockOwner(ctx context.Context, uid uint32) (func(), error) {
	for {
		s.mu.Lock()
		busy, ok := s.owners[uid]
		if !ok {
			done := make(chan struct{})
			s.owners[uid] = done
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.owners, uid)
				s.mu.Unlock()
				close(done)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
