package daemon

import (
	"bufio"
	"bytes"
	"net"
	"runtime"
	"testing"
)

// TestIdleConnectionsHoldLittle: a served connection holds 4 KiB read
// and write buffers for its life, not 64 and 32: a user's share of idle
// connections cost the daemon about 100 KiB of heap each.
func TestIdleConnectionsHoldLittle(t *testing.T) {
	h := newHarness(t)
	const conns = 200
	reply := bufio.NewReaderSize(nil, 4096) // the test's own, reused
	held := make([]net.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range conns {
		c, err := net.Dial("unix", h.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := c.Write([]byte(`{"id":1,"method":"hello"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		reply.Reset(c)
		line, err := reply.ReadSlice('\n')
		if err != nil || !bytes.Contains(line, []byte(`"ok":true`)) {
			t.Fatalf("hello: %q, %v", line, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perConn := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / conns
	t.Logf("%d idle connections: %d KiB of heap each", conns, perConn>>10)
	if perConn > 16<<10 {
		t.Fatalf("an idle connection holds %d KiB of the daemon's heap; its buffers are %d KiB", perConn>>10, (lineBufferBytes+connWriteBytes)>>10)
	}
}
