package testutil

import (
	"net"
	"testing"
)

// FreePort gives ports below the kernel's ephemeral range, each once, that
// a server can listen on.
func TestFreePortBelowTheEphemeralRange(t *testing.T) {
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < lowestPort || p >= ephemeralStart() {
			t.Fatalf("port %d outside %d..%d", p, lowestPort, ephemeralStart()-1)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
	ln, err := net.Listen("tcp", FreeLoopback(t))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
}
