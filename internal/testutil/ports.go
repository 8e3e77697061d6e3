package testutil

import (
	"net"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

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

// ReusePortListener is a TCP listener on 127.0.0.1:port (0: any free port)
// with SO_REUSEPORT on, as a service sharing its port across processes
// listens (and CRIU binds a restored one), and its port; closed when t ends
// unless the caller closes it first.
func ReusePortListener(t testing.TB, port int) (*os.File, int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "reuseport-listener")
	t.Cleanup(func() { f.Close() })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return f, sa.(*unix.SockaddrInet4).Port
}
