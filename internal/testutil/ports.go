package testutil

import (
	"net"
	"testing"
)

// FreePort is a loopback TCP port that nothing listened on a moment ago:
// for a server the test starts next (another process may take it first,
// which the test then sees as a failure to listen).
func FreePort(t testing.TB) int {
	t.Helper()
	return freeAddr(t).Port
}

// FreeLoopback is FreePort as a host:port address.
func FreeLoopback(t testing.TB) string {
	t.Helper()
	return freeAddr(t).String()
}

func freeAddr(t testing.TB) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr)
}
