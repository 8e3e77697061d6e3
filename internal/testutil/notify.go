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
// datagram socket named by NOTIFY_SOCKET.
type Notify struct {
	Path string
	conn *net.UnixConn
}

// NewNotify listens on a fresh NOTIFY_SOCKET path in dir.
func NewNotify(t testing.TB, dir string) *Notify {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("notify%d.sock", notifySeq.Add(1)))
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Notify{Path: path, conn: c}
}

// WaitFor reads datagrams until one holds the line want (e.g. "READY=1"),
// returning every line seen; it fails t after timeout.
func (n *Notify) WaitFor(t testing.TB, want string, timeout time.Duration) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(timeout)
	buf := make([]byte, 4096)
	for {
		n.conn.SetReadDeadline(deadline)
		k, err := n.conn.Read(buf)
		if err != nil {
			t.Fatalf("waiting for %q on NOTIFY_SOCKET (saw %q): %v", want, seen, err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(buf[:k])), "\n") {
			seen = append(seen, l)
			if l == want {
				return seen
			}
		}
	}
}
