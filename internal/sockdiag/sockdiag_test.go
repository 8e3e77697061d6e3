package sockdiag

import (
	"errors"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// testUID owns the client sockets the tests create as another user.
const testUID = 54321

// dialAs connects to ln from a socket created with file-system uid uid (the
// uid the kernel records as a new socket's owner) and returns both ends.
func dialAs(t *testing.T, ln net.Listener, uid int) (client, server net.Conn) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		// Setfsuid acts on this thread only, which is then thrown away.
		runtime.LockOSThread()
		unix.Setfsuid(uid)
		c, err := net.Dial("tcp", ln.Addr().String())
		client = c
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func ends(c net.Conn) (remote, local netip.AddrPort) {
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort()
}

func open(t *testing.T) *Conn {
	t.Helper()
	c, err := Open(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOwner: the owner of a loopback peer's socket is the uid that created
// it, over IPv4, IPv6 and IPv4 mapped into IPv6.
func TestOwner(t *testing.T) {
	testutil.RequiresRoot(t)
	d := open(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "[::ffff:127.0.0.1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("%s: %v (skipped)", addr, err)
			continue
		}
		defer ln.Close()
		for _, uid := range []int{0, testUID} {
			_, server := dialAs(t, ln, uid)
			got, err := d.Owner(ends(server))
			if err != nil || got != uint32(uid) {
				t.Errorf("%s: owner of a peer created by uid %d: %d, %v", addr, uid, got, err)
			}
		}
	}
}

// TestOwnerNotFound: ends that no connected socket of this host has give
// ErrNotFound, including the ends of a listener's port, which the kernel's
// lookup answers with the listener (owned by root) itself.
func TestOwnerNotFound(t *testing.T) {
	testutil.RequiresRoot(t)
	d := open(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lnAddr := ln.Addr().(*net.TCPAddr).AddrPort()
	_, server := dialAs(t, ln, testUID)
	remote, local := ends(server)
	for _, tc := range []struct {
		what          string
		local, remote netip.AddrPort
	}{
		{"a remote host's peer", netip.MustParseAddrPort("192.0.2.7:40000"), local},
		{"a listener's port", lnAddr, netip.MustParseAddrPort("192.0.2.7:40000")},
		{"the wrong peer port", netip.AddrPortFrom(remote.Addr(), remote.Port()+1), local},
	} {
		if uid, err := d.Owner(tc.local, tc.remote); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: uid %d, %v; want ErrNotFound", tc.what, uid, err)
		}
	}
	if _, err := d.Owner(netip.AddrPort{}, local); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("no address: %v; want an error other than ErrNotFound", err)
	}
	if uid, err := d.Owner(remote, local); err != nil || uid != testUID {
		t.Errorf("after the misses, the peer's owner: %d, %v", uid, err)
	}
}

// TestOwnerAllocs: a lookup allocates nothing.
func TestOwnerAllocs(t *testing.T) {
	testutil.RequiresRoot(t)
	d := open(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, server := dialAs(t, ln, testUID)
	remote, local := ends(server)
	if n := testing.AllocsPerRun(100, func() { d.Owner(remote, local) }); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// BenchmarkOwner measures one lookup of a loopback peer.
func BenchmarkOwner(b *testing.B) {
	d, err := Open(time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	remote, local := ends(s)
	for b.Loop() {
		if _, err := d.Owner(remote, local); err != nil {
			b.Fatal(err)
		}
	}
}
