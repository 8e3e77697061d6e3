package freeport

import (
	"net"
	"strconv"
	"testing"
)

// Pick gives ports below the kernel's ephemeral range, each once, that a
// server can listen on.
func TestPickBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if p < Lowest || p >= EphemeralStart() {
			t.Fatalf("port %d outside %d..%d", p, Lowest, EphemeralStart()-1)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
	p, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
