package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// handler answers one request with Responses, StreamLines and holds.
type handler func(req api.Request) []any

// hold, among a handler's lines, keeps the call open until the client
// hangs up.
type hold struct{}

// fakeDaemon is a unix-socket server that records requests and answers them
// with canned lines per method.
type fakeDaemon struct {
	path     string
	handlers map[string]handler

	mu      sync.Mutex
	reqs    []api.Request
	reqConn []int // the connection of each request, numbered from 1
	conns   map[net.Conn]bool

	ln net.Listener
	wg sync.WaitGroup
}

// newFakeDaemon serves handlers until the test ends.
func newFakeDaemon(t *testing.T, handlers map[string]handler) *fakeDaemon {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDaemon{path: path, handlers: handlers, conns: map[net.Conn]bool{}, ln: ln}
	d.wg.Add(1)
	go d.accept()
	t.Cleanup(d.close)
	return d
}

func (d *fakeDaemon) accept() {
	defer d.wg.Done()
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns[conn] = true
		n := len(d.conns)
		d.mu.Unlock()
		d.wg.Add(1)
		go d.serve(conn, n)
	}
}

func (d *fakeDaemon) serve(conn net.Conn, n int) {
	defer d.wg.Done()
	defer conn.Close()
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		var req api.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			writeLine(conn, api.Response{OK: false, Error: err.Error(), Code: api.CodeBadRequest})
			continue
		}
		d.mu.Lock()
		d.reqs = append(d.reqs, req)
		d.reqConn = append(d.reqConn, n)
		h := d.handlers[req.Method]
		d.mu.Unlock()
		if h == nil {
			h = answer(failure(api.CodeUnknownMethod, "unknown method "+req.Method))
		}
		for _, line := range h(req) {
			switch l := line.(type) {
			case api.Response:
				l.ID = req.ID
				writeLine(conn, l)
			case api.StreamLine:
				l.ID = req.ID
				writeLine(conn, l)
			case hold:
				for sc.Scan() { // until the client hangs up
				}
				return
			}
		}
	}
}

func writeLine(conn net.Conn, v any) {
	b, _ := json.Marshal(v)
	_, _ = conn.Write(append(b, '\n'))
}

func (d *fakeDaemon) close() {
	_ = d.ln.Close()
	d.mu.Lock()
	for c := range d.conns {
		_ = c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// requests returns the requests received so far.
func (d *fakeDaemon) requests() []api.Request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]api.Request(nil), d.reqs...)
}

// connections returns the connection number of each request so far.
func (d *fakeDaemon) connections() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.reqConn...)
}

// only returns the one request received, failing the test otherwise.
func (d *fakeDaemon) only(t *testing.T) api.Request {
	t.Helper()
	reqs := d.requests()
	if len(reqs) != 1 {
		t.Fatalf("daemon got %d requests, want 1: %+v", len(reqs), reqs)
	}
	return reqs[0]
}

// params decodes the one request's params into p after checking its method.
func (d *fakeDaemon) params(t *testing.T, method string, p any) {
	t.Helper()
	req := d.only(t)
	if req.Method != method {
		t.Fatalf("method = %q, want %q", req.Method, method)
	}
	if err := json.Unmarshal(req.Params, p); err != nil {
		t.Fatalf("decode %s params %s: %v", method, req.Params, err)
	}
}

// answer is a handler that always sends lines.
func answer(lines ...any) handler {
	return func(api.Request) []any { return lines }
}

// result is a successful response carrying v.
func result(v any) api.Response {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return api.Response{OK: true, Result: b}
}

// failure is a failed response.
func failure(code api.Code, msg string) api.Response {
	return api.Response{OK: false, Error: msg, Code: code}
}

// event is one streamed line.
func event(e api.Event) api.StreamLine {
	return api.StreamLine{Event: &e}
}

// ctl runs gpuschedctl against d (nil: no --socket) and returns its output
// and exit status.
func ctl(t *testing.T, d *fakeDaemon, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	if d != nil {
		args = append([]string{"--socket", d.path}, args...)
	}
	code = Main(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// lockedBuffer is an output a test can wait on while a command still runs.
type lockedBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed *sync.Cond
}

func newLockedBuffer() *lockedBuffer {
	l := &lockedBuffer{}
	l.changed = sync.NewCond(&l.mu)
	return l
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changed.Broadcast()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor blocks until the output contains s.
func (l *lockedBuffer) waitFor(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !strings.Contains(l.b.String(), s) {
		l.changed.Wait()
	}
}

// sameJSON reports whether a and b hold equal JSON values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("invalid JSON %q: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("invalid JSON %q: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}
