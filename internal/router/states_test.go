package router

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// listingDaemon answers PS with procs once answer is closed, counting
// the calls.
type listingDaemon struct {
	Daemon
	calls  atomic.Int32
	answer chan struct{}
	procs  []api.Process
	err    error
}

func (d *listingDaemon) PS(context.Context) ([]api.Process, error) {
	d.calls.Add(1)
	<-d.answer
	return d.procs, d.err
}

// TestProcessStatesOneCallForAll: however many requests ask at once, or
// within the TTL after, the daemon is asked once, and only the router's
// own processes are shown.
func TestProcessStatesOneCallForAll(t *testing.T) {
	own := uint32(os.Getuid())
	d := &listingDaemon{answer: make(chan struct{}), procs: []api.Process{
		{Name: "alpha", UID: own, State: api.StateFrozen},
		{Name: "beta", UID: own + 1, State: api.StateRunning}, // another user's, in root's listing
	}}
	s := &processStates{d: d, ttl: time.Hour}
	var wg sync.WaitGroup
	results := make(chan map[string]api.Process, 200)
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.get(context.Background(), context.Background())
			if err != nil {
				t.Error(err)
			}
			results <- got
		}()
	}
	for d.calls.Load() == 0 {
		time.Sleep(time.Millisecond) // the first request has asked
	}
	close(d.answer)
	wg.Wait()
	close(results)
	for got := range results {
		if len(got) != 1 || got["alpha"].State != api.StateFrozen {
			t.Fatalf("states %v; want the router's alpha alone", got)
		}
	}
	if n := d.calls.Load(); n != 1 {
		t.Errorf("200 requests asked the daemon %d times; want once", n)
	}
}

// TestProcessStatesAskAgainAfterTheTTL: past the TTL the next request asks
// again; an error is an answer too, shown until then; a request that
// hangs up while another's call is in flight is let go.
func TestProcessStatesAskAgainAfterTheTTL(t *testing.T) {
	d := &listingDaemon{answer: make(chan struct{}), err: errors.New("daemon down")}
	close(d.answer)
	s := &processStates{d: d, ttl: 0}
	for range 3 {
		if _, err := s.get(context.Background(), context.Background()); err == nil || err.Error() != "daemon down" {
			t.Fatalf("get: %v", err)
		}
	}
	if n := d.calls.Load(); n != 3 {
		t.Errorf("3 requests with no TTL asked %d times", n)
	}
	slow := &listingDaemon{answer: make(chan struct{})}
	s = &processStates{d: slow, ttl: time.Hour}
	go s.get(context.Background(), context.Background())
	for slow.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.get(ctx, context.Background()); !errors.Is(err, context.Canceled) {
		t.Errorf("a request gone while another's call is in flight: %v", err)
	}
	close(slow.answer)
}
