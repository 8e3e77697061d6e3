package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// setConnTimeouts shortens the connection time limits for one test. Call
// it before starting the daemon: the cleanup that restores them then runs
// after the daemon has stopped.
func setConnTimeouts(t *testing.T, line, write time.Duration) {
	oldLine, oldWrite := lineTimeout, writeTimeout
	lineTimeout, writeTimeout = line, write
	t.Cleanup(func() { lineTimeout, writeTimeout = oldLine, oldWrite })
}

func (s *connSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// TestAbuseStalledPartialLine: a peer that sends half a request line and
// stalls holds nothing: others are served (a kill of the very name it
// named included), an idle connection between requests is kept, and the
// stalled one is told why and dropped.
func TestAbuseStalledPartialLine(t *testing.T) {
	setConnTimeouts(t, 300*time.Millisecond, 30*time.Second)
	h := newHarness(t)
	h.run("target", "sleep", "1000")
	idle := h.raw()
	if r := idle.call(api.MethodHello, nil); r["ok"] != true {
		t.Fatal(r)
	}
	stalled := h.raw()
	if _, err := stalled.c.Write([]byte(`{"method":"kill","params":{"name":"target"`)); err != nil {
		t.Fatal(err)
	}
	if p, err := h.client().Kill(ctxT(t), api.KillParams{Name: "target"}); err != nil || p.State != api.StateExited {
		t.Fatalf("kill while another connection stalls on the same name: %+v %v", p, err)
	}
	rest := stalled.expectClosed()
	if !bytes.Contains(rest, []byte(`"code":"bad_request"`)) || !bytes.Contains(rest, []byte("unfinished")) {
		t.Fatalf("stalled peer was sent %q before the close", rest)
	}
	// The idle connection outlived the stalled one's deadline and still serves.
	if r := idle.call(api.MethodPS, nil); r["ok"] != true {
		t.Fatalf("idle connection: %v", r)
	}
}

// TestAbuseShutdownWhileStalled: a half-sent line does not hold up
// shutdown; the peer is closed by the shutdown, not by the line deadline.
func TestAbuseShutdownWhileStalled(t *testing.T) {
	h := newHarness(t)
	stalled := h.raw()
	if r := stalled.call(api.MethodHello, nil); r["ok"] != true {
		t.Fatal(r)
	}
	if _, err := stalled.c.Write([]byte(`{"method":"hel`)); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if rest := stalled.expectClosed(); bytes.Contains(rest, []byte("unfinished")) {
		t.Fatalf("closed by the line deadline, not by the shutdown: %q", rest)
	}
}

// TestAbuseOversizeLines: oversize lines are answered too_large and the
// connection stays usable; an endless line is discarded as it comes,
// never buffered whole.
func TestAbuseOversizeLines(t *testing.T) {
	h := newHarness(t)
	rc := h.raw()
	for _, n := range []int{api.MaxLineBytes, 3 * api.MaxLineBytes} {
		go rc.c.Write(append(bytes.Repeat([]byte("x"), n), '\n'))
		if r := rc.recv(); r["code"] != string(api.CodeTooLarge) {
			t.Fatalf("%d-byte line: %v", n, r)
		}
		if r := rc.call(api.MethodHello, nil); r["ok"] != true {
			t.Fatalf("after a %d-byte line: %v", n, r)
		}
	}

	// A line over 256 MiB without a newline allocates about one line's
	// worth, not the input's.
	const endless = 256 << 20
	r := newLineReader(io.MultiReader(io.LimitReader(repeatReader('x'), endless), strings.NewReader("\n{}\n")), nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := r.next()
	runtime.ReadMemStats(&after)
	var tooLong *lineTooLong
	if !errors.As(err, &tooLong) {
		t.Fatalf("endless line: %v", err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Fatalf("reading a %d MiB line allocated %d MiB", endless>>20, grew>>20)
	}
	if line, err := r.next(); err != nil || string(line) != "{}" {
		t.Fatalf("next line %q %v", line, err)
	}
}

// TestAbuseLongIDRefused: an id over api.MaxIDBytes is refused, answered
// without it, and the connection stays usable; one at the bound is echoed.
// The daemon echoes an id in every line of its answer: a follow of 65,536
// lines with an id of 100 KB had it write 6.5 GB, 11 s of its CPU.
func TestAbuseLongIDRefused(t *testing.T) {
	h := newHarness(t)
	rc := h.raw()
	id := func(n int) string { return `"` + strings.Repeat("i", n-2) + `"` }
	rc.send(`{"id":` + id(api.MaxIDBytes+1) + `,"method":"hello"}`)
	r := rc.recv()
	if _, echoed := r["id"]; echoed || r["code"] != string(api.CodeBadRequest) || !strings.Contains(r["error"].(string), "id of") {
		t.Fatalf("an id of %d bytes: %.200v", api.MaxIDBytes+1, r)
	}
	rc.send(`{"id":` + id(api.MaxIDBytes) + `,"method":"hello"}`)
	if r := rc.recv(); r["ok"] != true || `"`+r["id"].(string)+`"` != id(api.MaxIDBytes) {
		t.Fatalf("an id of %d bytes: %.200v", api.MaxIDBytes, r)
	}
}

type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// TestAbuseNonReadingPeerDropped: a peer that follows a chatty log and
// never reads is dropped once a write blocks past the write timeout; its
// connection is freed and shutdown is not held up.
func TestAbuseNonReadingPeerDropped(t *testing.T) {
	setConnTimeouts(t, 30*time.Second, 200*time.Millisecond)
	h := newHarness(t)
	// The flood waits for the test (a fifo opened and closed): a follow
	// that starts after 20 MB sees only the log's last MiB, not "ready".
	gate := filepath.Join(h.dir, "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	h.run("chatty", "sh", "-c", "echo ready; cat "+gate+" >/dev/null; yes 'a line of log output that nobody reads' | head -c 20000000; exec sleep 1000")
	h.followUntil("chatty", "ready")
	f, err := os.OpenFile(gate, os.O_WRONLY, 0) // blocks until the script reads
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	rc := h.raw()
	if r := rc.call(api.MethodHello, nil); r["ok"] != true {
		t.Fatal(r)
	}
	rc.send(`{"id":1,"method":"logs","params":{"name":"chatty","lines":-1,"follow":true}}`)
	waitHangup(t, rc.c)
	rc.expectClosed() // what was in flight, then EOF
	if r := h.raw().call(api.MethodHello, nil); r["ok"] != true {
		t.Fatal(r)
	}
	h.stop()
}

// TestAbuseConnectionFlood runs the real binary with --max-conns 8: the
// connections past the limit get one unavailable line and are closed, the
// established ones keep working, closing some makes room, and the daemon's
// open descriptors stay bounded.
func TestAbuseConnectionFlood(t *testing.T) {
	h := prepareHarness(t)
	const limit = 8
	n := testutil.NewNotify(t, h.dir)
	dp := h.spawnBinary(exec.Command(h.bins.Daemon, append(h.binaryArgs(), "--max-conns", strconv.Itoa(limit))...), "NOTIFY_SOCKET="+n.Path)
	n.WaitFor(t, "READY=1", 30*time.Second)
	pid := dp.cmd.Process.Pid
	dial := func() *rawConn {
		c, err := net.Dial("unix", h.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
	}
	base := fdCount(t, pid)
	var open []*rawConn
	for i := 0; i < limit; i++ {
		rc := dial()
		if r := rc.call(api.MethodHello, nil); r["ok"] != true {
			t.Fatalf("connection %d of %d: %v", i+1, limit, r)
		}
		open = append(open, rc)
	}
	for i := 0; i < 50; i++ {
		rc := dial()
		if r := rc.recv(); r["code"] != string(api.CodeUnavailable) || !strings.Contains(r["error"].(string), "too many connections") {
			t.Fatalf("connection over the limit got %v", r)
		}
		if rest := rc.expectClosed(); len(rest) != 0 {
			t.Fatalf("more than one line after the refusal: %q", rest)
		}
		rc.c.Close()
	}
	if got := fdCount(t, pid); got > base+limit+4 {
		t.Fatalf("daemon holds %d descriptors: %d before, limit %d", got, base, limit)
	}
	for i, rc := range open {
		if r := rc.call(api.MethodPS, nil); r["ok"] != true {
			t.Fatalf("established connection %d after the flood: %v", i, r)
		}
	}
	for _, rc := range open[:3] {
		rc.c.Close()
	}
	// The daemon notices the closes as it reads; a refused attempt is retried.
	for accepted := 0; accepted < 3; {
		rc := dial()
		_, _ = rc.c.Write([]byte(`{"method":"hello"}` + "\n")) // a refused one may be closed already
		r := rc.recv()
		switch {
		case r["ok"] == true:
			accepted++
		case r["code"] == string(api.CodeUnavailable):
			rc.c.Close()
			time.Sleep(5 * time.Millisecond)
		default:
			t.Fatal(r)
		}
	}
}

// waitHangup blocks, without reading, until the daemon has closed its end
// of c (POLLRDHUP), or fails t after a minute.
func waitHangup(t *testing.T, c net.Conn) {
	t.Helper()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		for {
			n, err = unix.Poll(fds, 60000)
			if !errors.Is(err, unix.EINTR) {
				return
			}
		}
	})
	if err != nil || n == 0 {
		t.Fatalf("the daemon did not drop the connection within a minute: %v", err)
	}
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestAbuseSquattedSocket: another program listening on the socket path,
// or a directory there, makes the daemon refuse to start with an error
// naming the path, and leaves what is there alone.
func TestAbuseSquattedSocket(t *testing.T) {
	h := prepareHarness(t)
	if err := os.MkdirAll(filepath.Dir(h.cfg.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	squatter, err := net.Listen("unix", h.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := runOnce(t, h.cfg); err == nil || !strings.Contains(err.Error(), h.cfg.Socket) {
		t.Fatalf("daemon over a squatted socket: %v", err)
	}
	c, err := net.Dial("unix", h.cfg.Socket)
	if err != nil {
		t.Fatalf("the squatter's socket was taken away: %v", err)
	}
	c.Close()
	squatter.Close()

	if err := os.Mkdir(h.cfg.Socket, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := runOnce(t, h.cfg); err == nil || !strings.Contains(err.Error(), h.cfg.Socket) || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("daemon over a directory: %v", err)
	}
	if fi, err := os.Lstat(h.cfg.Socket); err != nil || !fi.IsDir() {
		t.Fatalf("directory at the socket path was touched: %v", err)
	}
}

// TestAbuseLongLinesHeldPerUser: a real user's connections in the middle
// of long request lines hold at most --max-request-bytes-per-user of the
// daemon's memory (1 MiB here: one line at a time). Before, each of a
// user's 256 connections could hold a partial line of 1 MiB for the line
// timeout (a red-team pass: 250 of them took the daemon from 25 to 351 MB,
// and every user could do as much). The first connection's line, read
// past the read buffer (its writes fit a 4 KiB send buffer only as the
// daemon reads), holds the budget: a second long line of the user's is
// read through and refused, resource_exhausted naming the setting, on a
// connection that goes on serving; another user's is not; and once the
// first line ends, the user's next long line is read.
func TestAbuseLongLinesHeldPerUser(t *testing.T) {
	alice, bob := testutil.NewUser(t, "gslines-a", "gslines"), testutil.NewUser(t, "gslines-b", "gslines")
	h := newHarness(t, func(c *config.Config) { c.Group, c.Limits.LineMiBPerUser = alice.Group, 1 })
	conns := h.rawsAsUser(alice, 2)
	first, second := conns[0], conns[1]
	if err := first.c.(*net.UnixConn).SetWriteBuffer(4096); err != nil {
		t.Fatal(err)
	}
	long := `{"id":1,"method":"ps","params":{"x":"` + strings.Repeat("a", 200<<10) + `"}}`
	half := len(long) / 2
	if _, err := first.c.Write([]byte(long[:half])); err != nil { // returns once the daemon has read most of it
		t.Fatal(err)
	}
	second.send(long)
	if resp := second.recv(); resp["ok"] == true || resp["code"] != string(api.CodeResourceExhausted) || !strings.Contains(fmt.Sprint(resp["error"]), "--max-request-bytes-per-user") {
		t.Fatalf("a second long line of the user's at once: %v; want resource_exhausted naming --max-request-bytes-per-user", resp)
	}
	if resp := second.call(api.MethodPS, api.PSParams{}); resp["ok"] != true {
		t.Fatalf("a short call on the refused line's connection: %v", resp)
	}
	other := h.rawAsUser(bob)
	other.send(long)
	if resp := other.recv(); resp["code"] == string(api.CodeResourceExhausted) {
		t.Fatalf("another user's long line: %v", resp)
	}
	first.send(long[half:])
	if resp := first.recv(); resp["code"] == string(api.CodeResourceExhausted) {
		t.Fatalf("the first long line, once whole: %v", resp)
	}
	// The daemon gives a line's budget back as it reads the next line on
	// that connection: one more call there has it given back.
	if resp := first.call(api.MethodPS, api.PSParams{}); resp["ok"] != true {
		t.Fatalf("a short call after the long line: %v", resp)
	}
	second.send(long)
	if resp := second.recv(); resp["code"] == string(api.CodeResourceExhausted) {
		t.Fatalf("the user's long line once the first ended: %v", resp)
	}
}
