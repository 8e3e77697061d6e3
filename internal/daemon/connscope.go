package daemon

import "sync"

// connScope holds what lives as long as one client connection: the leases
// acquired on it are released when it closes, however it closes.
type connScope struct {
	mu     sync.Mutex
	closed bool
	fns    []func()
}

// onClose runs fn when the connection closes (at once if it has).
func (s *connScope) onClose(fn func()) {
	s.mu.Lock()
	if !s.closed {
		s.fns = append(s.fns, fn)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	fn()
}

func (s *connScope) close() {
	s.mu.Lock()
	fns := s.fns
	s.closed, s.fns = true, nil
	s.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
