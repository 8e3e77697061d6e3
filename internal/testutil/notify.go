package testutil

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var notifySeq atomic.Int64

// Notify receives sd_notify datagrams the way systemd does, on a Unix
// datagram socket named by NOTIFY_SOCKET: it reads every one as it comes
// (a queue nobody reads fills after a few datagrams, and a sender then
// waits) and keeps their lines for WaitFor.
type Notify struct {
	Path  string
	lines chan string
}

// NewNotify listens on a fresh NOTIFY_SOCKET path in dir.
func NewNotify(t testing.TB, dir string) *Notify {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("notify%d.sock", notifySeq.Add(1)))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	n := &Notify{Path: path, lines: make(chan string, 1<<16)}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
				select {
				case n.lines <- l:
				default: // kept lines are bounded: a test reads far fewer
				}
			}
		}
	}()
	return n
}

// WaitFor takes the lines received, in order, until one is want (e.g.
// "READY=1"), and returns every line it took; it fails t after timeout.
func (n *Notify) WaitFor(t testing.TB, want string, timeout time.Duration) []string {
	t.Helper()
	var seen []string
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case l := <-n.lines:
			seen = append(seen, l)
			if l == want {
				return seen
			}
		case <-deadline.C:
			t.Fatalf("waiting for %q on NOTIFY_SOCKET (saw %q): none within %v", want, seen, timeout)
		}
	}
}
