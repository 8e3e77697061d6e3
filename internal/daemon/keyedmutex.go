package daemon

import (
	"context"
	"sync"

	"github.com/gpusched/gpusched/internal/proctable"
)

// keyedMutex serializes lifecycle operations per process while
// letting different processes proceed in parallel. Its keys are process
// keys: one user's process never waits on another's of the same name.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[proctable.Key]*keyedLock
}

type keyedLock struct {
	ch   chan struct{} // holds one token when free
	refs int
}

// lock waits for key's lock or ctx; the returned func releases it.
func (k *keyedMutex) lock(ctx context.Context, key proctable.Key) (func(), error) {
	l, release := k.ref(key)
	select {
	case <-l.ch:
		return func() { l.ch <- struct{}{}; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// tryLock takes key's lock only if it is free.
func (k *keyedMutex) tryLock(key proctable.Key) (func(), bool) {
	l, release := k.ref(key)
	select {
	case <-l.ch:
		return func() { l.ch <- struct{}{}; release() }, true
	default:
		release()
		return nil, false
	}
}

// ref finds or makes key's lock and counts a user of it until release.
func (k *keyedMutex) ref(key proctable.Key) (*keyedLock, func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[proctable.Key]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		l.ch <- struct{}{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	return l, func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
