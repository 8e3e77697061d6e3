// Package freeport picks a loopback TCP port for a server a test starts
// next: one nothing listened on a moment ago (another process may still
// take it first, which the test then sees as a failure to listen), below
// the kernel's range of ephemeral ports (ip_local_port_range). The
// outgoing connections of tests running meanwhile take their ports from
// that range, and so does a listen on port 0: in one CI run a connection
// took such a port before slurmd bound it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Lowest is the lowest port Pick gives: above the ports services are
// commonly given.
const Lowest = 10000

// handedOut is every port Pick gave in this process: none is given twice
// (a test starting two servers asks for two ports before either listens).
var handedOut sync.Map

// Pick is a free loopback port in Lowest..EphemeralStart()-1.
func Pick() (int, error) {
	ephemeral := EphemeralStart()
	for range 1000 {
		port := Lowest + rand.IntN(ephemeral-Lowest)
		if _, taken := handedOut.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port in %d..%d", Lowest, ephemeral-1)
}

// EphemeralStart is the first port of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; 32768, its default, where it
// cannot be read or leaves little room below).
func EphemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= Lowest+1000 {
		return 32768
	}
	return n
}
