package activate

import (
	"context"
	"sync"
)

// state is what activations remember between calls, for the daemon's
// life only: when each process was last active, which are held, and which
// owners have an activation in progress.
type state struct {
	mu     sync.Mutex
	tick   uint64
	last   map[string]stamp // by process name
	held   map[string]stamp // by process name; n counts the holds
	owners map[uint32]chan struct{}
}

// stamp ties a count to one process: a name reused by a new process (a new
// record id) starts afresh.
type stamp struct {
	id string
	n  uint64
}

func newState() *state {
	return &state{last: map[string]stamp{}, held: map[string]stamp{}, owners: map[uint32]chan struct{}{}}
}

// touch marks name (record id) as active now.
func (s *state) touch(name, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tick++
	s.last[name] = stamp{id: id, n: s.tick}
}

// forget drops what is known of name, a record that is gone.
func (s *state) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.last, name)
	delete(s.held, name)
}

// lastActive is when name (record id) was last active: 0 for never.
func (s *state) lastActive(name, id string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.last[name]; st.id == id {
		return st.n
	}
	return 0
}

// isHeld reports whether name (record id) is held.
func (s *state) isHeld(name, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[name]
	return h.id == id && h.n > 0
}

// hold counts one more hold of name (record id); the returned func, safe
// to call more than once, ends it and marks name active.
func (s *state) hold(name, id string) func() {
	s.mu.Lock()
	if h := s.held[name]; h.id == id {
		s.held[name] = stamp{id: id, n: h.n + 1}
	} else {
		s.held[name] = stamp{id: id, n: 1}
	}
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if h := s.held[name]; h.id == id {
				if h.n <= 1 {
					delete(s.held, name)
				} else {
					s.held[name] = stamp{id: id, n: h.n - 1}
				}
			}
			s.mu.Unlock()
			s.touch(name, id)
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
