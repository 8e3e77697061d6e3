package daemon

import (
	"testing"
)

// TestConnSetUnknownPeers: peers of unknown uid (a metrics scraper on
// another host) have no per-user share, but together hold no more than the
// users' part of the cap, and root's reserve stays root's.
func TestConnSetUnknownPeers(t *testing.T) {
	const max, perUser = 12, 2 // root's reserve: 6
	s := newConnSet(max, perUser)
	add := func(uid uint32) error { return s.admit(uid, noUserName) }
	for i := range max - min(rootReserve, max/2) {
		if err := add(anyPeer); err != nil {
			t.Fatalf("unknown peer %d, past a share of %d: %v", i+1, perUser, err)
		}
	}
	if err := add(anyPeer); err != errConnsFull {
		t.Fatalf("unknown peer past the users' part: %v", err)
	}
	if err := add(1000); err != errConnsFull {
		t.Fatalf("a user while unknown peers hold the users' part: %v", err)
	}
	if err := add(0); err != nil {
		t.Fatalf("root while unknown peers hold the users' part: %v", err)
	}
}
