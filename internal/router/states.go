package router

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// statesTTL is how long GET /running shows one answer of the daemon.
const statesTTL = time.Second

// statesTimeout bounds the daemon's answer to that one call.
const statesTimeout = 10 * time.Second

// processStates is what GET /running shows of the router's processes: one
// listing of the daemon's, shared by every request within statesTTL and by
// those that come while it is asked. Any local user may ask for /running
// in a loop: at a daemon call a model a request, one user's loop held all
// the connections the daemon allows the router's user
// (--max-conns-per-user), and every wake then failed for everyone.
type processStates struct {
	d      Daemon
	ttl    time.Duration // statesTTL
	mu     sync.Mutex
	at     time.Time              // when the last answer came
	byName map[string]api.Process // the router's own processes then
	err    error
	asking chan struct{} // closed when the call in flight ends; nil: none
}

// get returns the router's processes by name, as the daemon listed them
// at most ttl ago, or why it could not, or ctx's error while it waits for
// another request's call. A call it makes runs under life (the router's),
// not ctx: its answer is everyone's, whoever hangs up.
func (s *processStates) get(ctx, life context.Context) (map[string]api.Process, error) {
	s.mu.Lock()
	for s.asking != nil {
		ch := s.asking
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	if !s.at.IsZero() && time.Since(s.at) < s.ttl {
		defer s.mu.Unlock()
		return s.byName, s.err
	}
	ch := make(chan struct{})
	s.asking = ch
	s.mu.Unlock()

	callCtx, cancel := context.WithTimeout(life, statesTimeout)
	list, err := s.d.PS(callCtx)
	cancel()
	byName := map[string]api.Process{}
	own := uint32(os.Getuid())
	for _, p := range list {
		if p.UID == own { // root's listing holds every user's
			byName[p.Name] = p
		}
	}
	s.mu.Lock()
	s.at, s.byName, s.err, s.asking = time.Now(), byName, err, nil
	s.mu.Unlock()
	close(ch)
	return byName, err
}
