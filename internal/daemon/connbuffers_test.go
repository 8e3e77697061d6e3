package daemon

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"testing"
)

// TestShortConnectionsReuseTheirBuffers: a connection's read and write
// buffers (96 KiB) go back to their pools when it ends, so a caller that
// opens a connection per call (the CLI, a flood of refused streams) costs
// the daemon no fresh buffers each time.
func TestShortConnectionsReuseTheirBuffers(t *testing.T) {
	h := newHarness(t)
	const conns = 300
	reply := bufio.NewReaderSize(nil, 4096) // the test's own, reused
	call := func() {
		c, err := net.Dial("unix", h.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(`{"id":1,"method":"hello"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		reply.Reset(c)
		line, err := reply.ReadSlice('\n')
		if err != nil || !bytes.Contains(line, []byte(`"ok":true`)) {
			t.Fatalf("hello: %q, %v", line, err)
		}
	}
	call() // the pools' first buffers
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range conns {
		call()
	}
	runtime.ReadMemStats(&after)
	// A collection may empty the pools once or twice: a few buffers, then.
	perConn := (after.TotalAlloc - before.TotalAlloc) / conns
	t.Logf("%d connections: %d KiB allocated each", conns, perConn>>10)
	if raceEnabled {
		t.Log("the race detector's sync.Pool drops buffers: allocation not checked")
	} else if perConn > 16<<10 {
		t.Fatalf("each connection allocated %d KiB; its buffers alone are %d KiB", perConn>>10, (lineBufferBytes+connWriteBytes)>>10)
	}
}
