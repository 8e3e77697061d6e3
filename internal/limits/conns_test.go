package limits

import (
	"errors"
	"testing"
)

// TestConnsUnknownPeers: peers of unknown uid (a metrics scraper on
// another host) have no per-user share, but together hold no more than the
// users' part of the cap, and root's reserve stays root's.
func TestConnsUnknownPeers(t *testing.T) {
	const max, reserve, perUser = 12, 8, 2 // root's reserve: 6, half of 12
	c := NewConns(max, reserve, perUser)
	add := func(uid uint32) error { return c.Admit(uid, func() string { return "u" }, "max-conns-per-user") }
	for i := range max - max/2 {
		if err := add(AnyPeer); err != nil {
			t.Fatalf("unknown peer %d, past a share of %d: %v", i+1, perUser, err)
		}
	}
	if err := add(AnyPeer); err != ErrConnsFull {
		t.Fatalf("unknown peer past the users' part: %v", err)
	}
	if err := add(1000); err != ErrConnsFull {
		t.Fatalf("a user while unknown peers hold the users' part: %v", err)
	}
	if err := add(Root); err != nil {
		t.Fatalf("root while unknown peers hold the users' part: %v", err)
	}
}

// TestConnsShare: a user past their share is refused naming the setting,
// holding what they held; a release gives a place back.
func TestConnsShare(t *testing.T) {
	c := NewConns(100, 8, 2)
	add := func(uid uint32) error { return c.Admit(uid, func() string { return "alice" }, "max-conns-per-user") }
	for range 2 {
		if err := add(1000); err != nil {
			t.Fatal(err)
		}
	}
	var ex *Exceeded
	if err := add(1000); !errors.As(err, &ex) || ex.Flag != "max-conns-per-user" {
		t.Fatalf("a third connection of a share of 2: %v; want Exceeded naming max-conns-per-user", err)
	}
	if n := c.Held(1000); n != 2 {
		t.Fatalf("held %d after a refusal, want 2", n)
	}
	if err := add(1001); err != nil {
		t.Fatalf("another user: %v", err)
	}
	c.Release(1000)
	if err := add(1000); err != nil {
		t.Fatalf("after a release: %v", err)
	}
}
