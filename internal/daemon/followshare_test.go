package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/logreply"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestFollowBacklogHeldToTheCallersShare: a `logs -f` of many lines sends
// them as events a chunk at a time, each chunk's encoding charged to the
// caller's share of the daemon's CPU: a caller over their share waits
// between chunks, and then gets every line once, in order. The first
// lines of a follow were sent an event at a time, with no share looked at
// after the log was read: 280 ms of the daemon's CPU for 65,536 lines.
func TestFollowBacklogHeldToTheCallersShare(t *testing.T) {
	const total = 2*logreply.Chunk + 100
	budget := &holdingBudget{uid: 0, let: make(chan struct{})}
	h := prepareHarness(t)
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = bulkgate.New(1).Metered(budget) })
	h.start()
	h.run("counter", "seq", "1", strconv.Itoa(total))
	h.waitExit("counter")
	waitLogged(t, h, "counter", strconv.Itoa(total))

	budget.arm()
	n := 0
	err := h.client().FollowLogs(ctxT(t), "counter", -1, func(l string) error {
		n++
		if want := strconv.Itoa(n); l != want {
			return errors.New("line " + want + " is " + strconv.Quote(l))
		}
		if n != logreply.Chunk {
			return nil
		}
		for deadline := time.Now().Add(30 * time.Second); budget.waiters() == 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				return errors.New("the daemon sent a chunk of lines over the caller's share and never waited for it")
			}
		}
		close(budget.let)
		return nil
	})
	if err != nil || n != total {
		t.Fatalf("follow: %d lines, %v; want %d", n, err, total)
	}
}

// TestFollowHeldToTheCallersShare: what a follow relays as the process
// writes is charged to the caller's share too: a caller over it waits
// before the next piece, and then gets the lines on, in order. A follower
// of `yes` kept half a CPU of the daemon busy, held to no share.
func TestFollowHeldToTheCallersShare(t *testing.T) {
	budget := &holdingBudget{uid: 0, let: make(chan struct{})}
	h := prepareHarness(t)
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = bulkgate.New(1).Metered(budget) })
	h.start()
	h.run("counter", "sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.01; done")

	budget.arm()
	held := make(chan bool, 1)
	go func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if budget.waiters() > 0 {
				held <- true
				close(budget.let)
				return
			}
		}
		held <- false
		close(budget.let)
	}()
	var got []int
	stop := errors.New("enough")
	err := h.client().FollowLogs(ctxT(t), "counter", 0, func(l string) error {
		n, err := strconv.Atoi(l)
		if err != nil {
			return err
		}
		if len(got) > 0 && n != got[len(got)-1]+1 {
			return errors.New("line " + l + " after " + strconv.Itoa(got[len(got)-1]))
		}
		if got = append(got, n); len(got) == 20 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("follow: %v after %v", err, got)
	}
	if !<-held {
		t.Fatal("the daemon relayed the follow over the caller's share and never waited for it")
	}
}

// TestFollowToAPagerHoldsNoTurn: a follow whose client has stopped reading
// (a pager showing its first screen) holds none of its user's turns while
// its first lines wait to be written: the user's other calls are answered.
// Each chunk of lines is written once its turn is given back.
func TestFollowToAPagerHoldsNoTurn(t *testing.T) {
	u := testutil.NewUser(t, "gspager", "gspagerg")
	setConnTimeouts(t, 30*time.Second, 5*time.Minute)
	h := newHarness(t, func(c *config.Config) { c.Group = u.Group; c.Limits.TurnsPerUser = 1; c.Limits.CPUPerUser = 0 })
	if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "counted", "--", "seq", "200000"); code != 0 {
		t.Fatalf("run: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(u, "wait", "counted"); code != 0 {
		t.Fatalf("wait: %s", errOut)
	}

	pager, paged, err := os.Pipe() // never read past what the kernel holds
	if err != nil {
		t.Fatal(err)
	}
	defer pager.Close()
	follow := exec.Command(h.bins.Ctl, "--socket", h.cfg.Socket, "logs", "-f", "-n", "-1", "counted")
	follow.Dir, follow.Env, follow.Stdout = "/", []string{"PATH=/usr/bin:/bin"}, paged
	follow.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	paged.Close()
	t.Cleanup(func() { follow.Process.Kill(); follow.Wait() })
	for deadline := time.Now().Add(time.Minute); pipeHolds(t, pager) < 60<<10; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the follow wrote %d bytes to its pager in a minute", pipeHolds(t, pager))
		}
	}

	answered := make(chan string, 1)
	go func() {
		_, errOut, code := h.ctlAs(u, "status")
		answered <- fmt.Sprintf("exit %d %s", code, errOut)
	}()
	select {
	case got := <-answered:
		if got != "exit 0 " {
			t.Fatalf("status: %s", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the user's status waited behind their follow's writes to a client that stopped reading")
	}
}

// pipeHolds is how many bytes wait in the pipe read from r.
func pipeHolds(t *testing.T, r *os.File) int {
	t.Helper()
	n, err := unix.IoctlGetInt(int(r.Fd()), unix.TIOCINQ) // FIONREAD
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLogged waits until name's last logged line is last.
func waitLogged(t *testing.T, h *harness, name, last string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		res, err := h.client().Logs(ctxT(t), name, 1)
		if err == nil && len(res) == 1 && res[0] == last {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's log never ended with %q: %v, %v", name, last, res, err)
		}
	}
}

// holdingBudget lets uid's work through until, once armed, it is charged;
// then uid is over its share until let is closed.
type holdingBudget struct {
	uid uint32
	let chan struct{}

	mu      sync.Mutex
	armed   bool
	charged bool
	waiting int
}

func (b *holdingBudget) arm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = true
}

// hold puts uid over its share now.
func (b *holdingBudget) hold() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed, b.charged = true, true
}

func (b *holdingBudget) waiters() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waiting
}

func (b *holdingBudget) Within(uid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if uid != b.uid || !b.charged {
		return true
	}
	select {
	case <-b.let:
		return true
	default:
		return false
	}
}

func (b *holdingBudget) Wait(ctx context.Context, uid uint32) error {
	if b.Within(uid) {
		return nil
	}
	b.mu.Lock()
	b.waiting++
	b.mu.Unlock()
	select {
	case <-b.let:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *holdingBudget) Charge(uid uint32, _ time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if uid == b.uid && b.armed {
		b.charged = true
	}
}

// TestEncodedEventsAsEmitted: event lines encoded ahead (logreply.Events,
// with the stream's prefix) are the lines emit writes for the same events.
func TestEncodedEventsAsEmitted(t *testing.T) {
	for _, id := range []string{"", "7", `"a \"b\""`, `{"k":[1,2]}`} {
		lines := []string{"one", "", "<two> & \"three\""}
		emitted := linesWritten(t, func(s *eventStream) error {
			for _, l := range lines {
				if err := s.emit(&api.Event{Type: api.EventLog, Name: "job", Line: l}); err != nil {
					return err
				}
			}
			return nil
		}, id)
		encoded := linesWritten(t, func(s *eventStream) error {
			return logreply.Events(s.prefix(), "job", tailOf(t, "", lines), s.emitEncoded)
		}, id)
		if encoded != emitted {
			t.Fatalf("id %s: encoded ahead\n%s\nemitted\n%s", id, encoded, emitted)
		}
	}
}

// linesWritten is what write writes to a stream of the call with id.
func linesWritten(t *testing.T, write func(*eventStream) error, id string) string {
	t.Helper()
	conn, peer := net.Pipe()
	got := make(chan string, 1)
	go func() {
		var b []byte
		buf := make([]byte, 4096)
		for {
			n, err := peer.Read(buf)
			b = append(b, buf[:n]...)
			if err != nil {
				got <- string(b)
				return
			}
		}
	}()
	var raw []byte
	if id != "" {
		raw = []byte(id)
	}
	err := write(&eventStream{w: newLineWriter(conn, connWriteBytes), id: raw})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	return <-got
}
