package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort is a loopback TCP port that nothing listened on a moment ago:
// for a server the test starts next (another process may take it first,
// which the test then sees as a failure to listen). It lies below the
// kernel's range of ephemeral ports (ip_local_port_range), from which the
// outgoing connections of tests running meanwhile take theirs: a port the
// kernel handed out for a listen on port 0 comes from that range, and in
// one CI run a connection took it before slurmd bound it.
func FreePort(t testing.TB) int {
	t.Helper()
	return freeAddr(t).Port
}

// FreeLoopback is FreePort as a host:port address.
func FreeLoopback(t testing.TB) string {
	t.Helper()
	return freeAddr(t).String()
}

// lowestPort is the lowest port FreePort picks: above the ports services
// are commonly given.
const lowestPort = 10000

// handedOut is every port FreePort gave in this process: none is given
// twice (a test starting two servers asks for two ports before either
// listens).
var handedOut sync.Map

func freeAddr(t testing.TB) *net.TCPAddr {
	t.Helper()
	ephemeral := ephemeralStart()
	for range 1000 {
		port := lowestPort + rand.IntN(ephemeral-lowestPort)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		}
	}
	t.Fatalf("no free port in %d..%d", lowestPort, ephemeral-1)
	return nil
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; 32768, its default, where it
// cannot be read or leaves no room below).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= lowestPort+1000 {
		return 32768
	}
	return n
}
