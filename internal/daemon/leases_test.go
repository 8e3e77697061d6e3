package daemon

import (
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestLeaseSnapshotIsOneMoment: a placement pass sees the held and the
// pending leases as they were at one moment, so a lease asked for after
// another's release is never judged against held leases that still
// count the released one. A client releases its lease and asks for a new
// one, over and over, while passes take snapshots: no snapshot may hold
// both a pending lease and the lease released before it was asked for.
func TestLeaseSnapshotIsOneMoment(t *testing.T) {
	s := newLeaseSet()
	first := &lease{uid: 1, count: 1}
	if err := s.add(first, 0, nil); err != nil {
		t.Fatal(err)
	}
	s.grant(first.id, []string{"GPU-0"})
	const rounds = 200000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		held := first
		for range rounds {
			s.remove(held.id)
			next := &lease{uid: 1, count: 1}
			if err := s.add(next, 0, nil); err != nil {
				t.Error(err)
				return
			}
			s.grant(next.id, []string{"GPU-0"})
			held = next
		}
	}()
	seen := 0
	for done := false; !done; {
		held, asked := s.snapshot()
		for _, a := range asked {
			for _, h := range held {
				if leaseNumber(t, h.id) < leaseNumber(t, strings.TrimPrefix(a.ID, leasePrefix)) {
					t.Fatalf("a snapshot held %s, released before %s was asked for, beside it", h.id, a.ID)
				}
			}
			seen++
		}
		s.mu.Lock()
		done = s.n > rounds
		s.mu.Unlock()
	}
	wg.Wait()
	if seen == 0 {
		t.Log("no snapshot caught a lease pending")
	}
}

// leaseNumber is N of lease id "lN".
func leaseNumber(t *testing.T, id string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(id, "l"))
	if err != nil {
		t.Fatalf("lease id %q", id)
	}
	return n
}
