package freeport

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
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

// TestPickClaimsAcrossProcesses: a port Pick gave is claimed for this
// process's life: another process (the claim's lock taken here as
// another's would be) is not given it, though nothing listens on it.
func TestPickClaimsAcrossProcesses(t *testing.T) {
	p, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(claimsDir, strconv.Itoa(p)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// flock locks belong to the open file: this second open is another
	// holder, as another process's would be.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Fatalf("port %d's claim could be taken by another holder while this process holds it", p)
	}
	if claim(p) {
		t.Fatalf("port %d claimed twice", p)
	}
}
