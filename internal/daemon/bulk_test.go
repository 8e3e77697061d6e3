package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// tailOf writes head and then lines to a log and tails all of it.
func tailOf(t *testing.T, head string, lines []string) *logfile.Tailed {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	b.WriteString(head)
	for _, l := range lines {
		b.WriteString(l + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tl, err := logfile.Tail(context.Background(), path, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// TestBulkGateLetsAnotherUserIn: while one user's bulk work holds the
// daemon's only bulk slot and more of it waits, another user's `logs`
// waits at the gate for the holder's next yield and is answered then,
// ahead of the rest of the first user's work. The first user's bulk work
// is the test's own, through the daemon's gate; the second user's `logs`
// is real, as a real unprivileged user. Placement passes go through a gate
// of their own here, so that the test counts the users' waiters alone.
func TestBulkGateLetsAnotherUserIn(t *testing.T) {
	hostile := testutil.NewUser(t, "gsbulkh", "gsbulk")
	victim := testutil.NewUser(t, "gsbulkv", "gsbulk")
	g := bulkgate.New(1)
	h := prepareHarness(t, func(c *config.Config) { c.Group = victim.Group })
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = usersGate{users: g, passes: bulkgate.New(1)} })
	h.start()
	if _, errOut, code := h.ctlAs(victim, "run", "--dir", "/", "talker", "--", "sh", "-c", "echo hello; exec sleep 1000"); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if out, _, _ := h.ctlAs(victim, "logs", "talker"); strings.Contains(out, "hello") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the talker never logged hello")
		}
	}

	ctx := ctxT(t)
	held, err := g.Enter(ctx, hostile.UID)
	if err != nil {
		t.Fatal(err)
	}
	var flood []<-chan *bulkgate.Slot
	for range 4 {
		ch := make(chan *bulkgate.Slot, 1)
		go func() {
			if s, err := g.Enter(ctx, hostile.UID); err == nil {
				ch <- s
			}
		}()
		flood = append(flood, ch)
		waitQueued(t, g, len(flood))
	}
	answered := make(chan string, 1)
	go func() {
		out, errOut, _ := h.ctlAs(victim, "logs", "talker")
		answered <- out + errOut
	}()
	waitQueued(t, g, len(flood)+1) // the victim's logs, at the gate
	select {
	case out := <-answered:
		t.Fatalf("logs answered while another user's bulk work held the slot: %q", out)
	default:
	}

	yielded := make(chan error, 1)
	go func() { yielded <- held.Yield(ctx) }()
	(<-flood[0]).Leave() // the oldest of the flood, queued before the victim
	select {
	case out := <-answered:
		if !strings.Contains(out, "hello") {
			t.Fatalf("logs = %q", out)
		}
	case <-time.After(time.Minute):
		t.Fatal("the victim's logs was not answered with the rest of the flood waiting")
	}
	for _, ch := range flood[1:] {
		(<-ch).Leave()
	}
	if err := <-yielded; err != nil {
		t.Fatal(err)
	}
	held.Leave()
}

// usersGate admits users' bulk work through one gate, placement passes
// through another.
type usersGate struct{ users, passes *bulkgate.Gate }

func (u usersGate) Await(ctx context.Context, uid uint32) error { return u.users.Await(ctx, uid) }

func (u usersGate) Within(uid uint32) bool { return u.users.Within(uid) }

func (u usersGate) Meter(ctx context.Context, uid uint32) (func(), error) {
	return u.users.Meter(ctx, uid)
}

func (u usersGate) Charge(uid uint32) func() { return u.users.Charge(uid) }

func (u usersGate) ChargeCPU(uid uint32, cpu time.Duration) { u.users.ChargeCPU(uid, cpu) }

func (u usersGate) Enter(ctx context.Context, uid uint32) (*bulkgate.Slot, error) {
	if uid == passUID {
		return u.passes.Enter(ctx, uid)
	}
	return u.users.Enter(ctx, uid)
}

// waitQueued waits until n wait at g.
func waitQueued(t *testing.T, g *bulkgate.Gate, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); g.Waiting() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d wait at the bulk gate, want %d", g.Waiting(), n)
		}
	}
}

// TestLogsReplyCostsOneCopy: a `logs` reply of a MiB is encoded into one
// allocation of its size and written to the connection from there: it
// costs the daemon about one reply's worth of allocation, not the four of
// gathering it by doublings and copying it into the line's buffer; and the
// line arrives whole.
func TestLogsReplyCostsOneCopy(t *testing.T) {
	lines := make([]string, logfile.MaxTailLines)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %09d", i)
	}
	res := api.LogsResult{Name: "job", Lines: lines}
	tl := tailOf(t, "", lines)
	want, err := encodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	want = append(append([]byte(`{"id":1,"ok":true,"result":`), want...), "}\n"...)
	conn, peer := net.Pipe()
	defer conn.Close()
	got := make(chan []byte, 1)
	go func() {
		h := sha256.New()
		io.Copy(h, peer)
		got <- h.Sum(nil)
	}()
	slot, err := bulkgate.New(1).Enter(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	w := newLineWriter(conn, 32<<10)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	raw, err := encodeLogs(context.Background(), slot, res.Name, tl)
	if err == nil {
		err = w.response(json.RawMessage("1"), raw, nil)
	}
	runtime.ReadMemStats(&after)
	slot.Leave()
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if sum := sha256.Sum256(want); !bytes.Equal(<-got, sum[:]) {
		t.Fatal("the line written differs from the reply encoded whole")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; raceEnabled {
		t.Log("the race detector allocates on its own: allocation not checked")
	} else if grew > uint64(len(want))*3/2 {
		t.Fatalf("a reply of %d KiB allocated %d KiB to encode and write", len(want)>>10, grew>>10)
	}
}

// TestLogsOfEmptyLinesCostTheirBytes: `logs -n -1` of a log of newlines,
// the flood's favourite, costs the daemon the bytes read and the reply:
// its 65,536 lines were a string header each, a MiB besides.
func TestLogsOfEmptyLinesCostTheirBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, bytes.Repeat([]byte("\n"), logfile.MaxTail), 0o600); err != nil {
		t.Fatal(err)
	}
	slot, err := bulkgate.New(1).Enter(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer slot.Leave()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tl, err := logfile.Tail(context.Background(), path, -1, 0)
	var raw encoded
	if err == nil {
		raw, err = encodeLogs(context.Background(), slot, "job", tl)
	}
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	var res api.LogsResult
	if err := json.Unmarshal(raw, &res); err != nil || len(res.Lines) != logfile.MaxTailLines || !res.Truncated {
		t.Fatalf("reply of %d bytes: %d lines, truncated %v, %v", len(raw), len(res.Lines), res.Truncated, err)
	}
	t.Logf("a reply of %d KiB: %d KiB allocated", len(raw)>>10, (after.TotalAlloc-before.TotalAlloc)>>10)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(len(raw))*3 {
		t.Fatalf("a reply of %d KiB allocated %d KiB to read and encode", len(raw)>>10, grew>>10)
	}
}
