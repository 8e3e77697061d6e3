// Package freeport picks a loopback TCP port for a server a test starts
// next: one nothing listened on a moment ago and no other test process was
// given (a process that is not one may still take it first, which the test
// then sees as a failure to listen), below
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
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Lowest is the lowest port Pick gives: above the ports services are
// commonly given.
const Lowest = 10000

// handedOut is every port Pick gave in this process: none is given twice
// (a test starting two servers asks for two ports before either listens).
var handedOut sync.Map

// claimsDir holds a lock file per port Pick gave, held by the process it
// gave it to until that ends: no two test processes running at once are
// given one port, though its server stops listening for a while (a
// hibernated one, whose thaw then found another package's server on it).
var claimsDir = filepath.Join(os.TempDir(), "gpusched-freeport")

// claim takes port for this process's life, or reports it another's.
func claim(port int) bool {
	if err := os.Mkdir(claimsDir, 0o777); err == nil {
		_ = unix.Chmod(claimsDir, 0o1777) // every test process's, whoever made it
	}
	f, err := os.OpenFile(filepath.Join(claimsDir, strconv.Itoa(port)), os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return true // no claims to be had: the listen below still checks
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return false
	}
	return true // f stays open, and locked, until the process ends
}

// Pick is a free loopback port in Lowest..EphemeralStart()-1.
func Pick() (int, error) {
	ephemeral := EphemeralStart()
	for range 1000 {
		port := Lowest + rand.IntN(ephemeral-Lowest)
		if _, taken := handedOut.LoadOrStore(port, true); taken || !claim(port) {
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
