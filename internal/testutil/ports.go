package testutil

import (
	"net"
	"strconv"
	"testing"

	"github.com/gpusched/gpusched/internal/freeport"
)

// FreePort is a loopback TCP port for a server the test starts next
// (freeport.Pick).
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freeport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// FreeLoopback is FreePort as a host:port address.
func FreeLoopback(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}
