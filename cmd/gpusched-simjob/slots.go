package main

import (
	"context"
	"sync"
)

// slots is llama-server's --parallel: at most n requests generate at once
// and the rest wait in arrival order. llama.cpp's tools/server defers a
// task that finds every slot busy (server-context.cpp, "no slot is
// available, defer task"; server_queue::defer appends to
// queue_tasks_deferred) and, as a slot frees, moves the first deferred
// task back to the front of the queue (server_queue::pop_deferred_task):
// first come, first served, whoever sent them, with no bound on the queue.
// A client that hangs up while waiting cancels its task
// (server_queue::cleanup_pending_task).
type slots struct {
	mu      sync.Mutex
	n       int
	free    int
	waiting []chan struct{} // in arrival order; each closed when it gets a slot
}

func newSlots(n int) *slots { return &slots{n: n, free: n} }

// count is the number of slots and of those busy.
func (s *slots) count() (n, busy int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.n - s.free
}

// take waits for a slot and returns the function that gives it back, or
// ctx's error when the client hangs up first.
func (s *slots) take(ctx context.Context) (func(), error) {
	s.mu.Lock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		s.mu.Unlock()
		return s.put, nil
	}
	ch := make(chan struct{})
	s.waiting = append(s.waiting, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return s.put, nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == ch {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return nil, ctx.Err()
		}
	}
	s.putLocked() // granted as the client hung up: pass it on
	return nil, ctx.Err()
}

func (s *slots) put() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.putLocked()
}

func (s *slots) putLocked() {
	if len(s.waiting) == 0 {
		s.free++
		return
	}
	close(s.waiting[0])
	s.waiting = s.waiting[1:]
}
