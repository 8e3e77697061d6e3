package daemon

import (
	"bufio"
	"fmt"
	"os"
	"os/user"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Issue 20: streaming calls are a resource of the daemon's, shared by
// every user; one user's streams must not take them from the others.

// TestRedTeamFollowsShareOneInotify: a user follows its log from more
// connections than root may hold inotify instances. Every follow works,
// another user's follow still works, root can still make an inotify
// instance, and the daemon holds one. Before, each follow took an instance
// of root's: past fs.inotify.max_user_instances every further follow, of
// any user, failed, and so did inotify_init for root anywhere on the host.
func TestRedTeamFollowsShareOneInotify(t *testing.T) {
	limit := testutil.InotifyLimit(t)
	if limit > 1024 {
		t.Skipf("fs.inotify.max_user_instances is %d: too many follows to open here", limit)
	}
	n := limit + 8
	attacker := testutil.NewUser(t, "gsstrfol", "gsstr")
	victim := testutil.NewUser(t, "gsstrvic", "gsstr")
	h := newHarness(t, func(c *config.Config) {
		c.Group = attacker.Group
		// The caps on streams and connections would stop the follows
		// before inotify does: not what this tests.
		c.Limits.StreamsPerUser = n + 8
		c.Limits.ConnsPerUser = n + 8
	})
	for _, r := range []struct {
		u    testutil.User
		name string
	}{{attacker, "spam"}, {victim, "work"}} {
		if _, errOut, code := h.ctlAs(r.u, "run", "--dir", "/", r.name, "--", "sleep", "1000"); code != 0 {
			t.Fatalf("run %s: %s", r.name, errOut)
		}
	}

	follows := h.rawsAsUser(attacker, n)
	for i := range follows {
		follows[i].send(`{"method":"logs","params":{"name":"spam","lines":1,"follow":true}}`)
	}
	if failed := h.followAll(t, "spam", follows); failed > 0 {
		t.Errorf("%d of %d follows by one user failed", failed, n)
	}
	if got := testutil.InotifyInstances(t); got > 1 {
		t.Errorf("the daemon holds %d inotify instances under %d follows, want at most 1", got, n)
	}
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("root cannot make an inotify instance: %v", err)
	} else {
		unix.Close(fd)
	}
	theirs := h.rawAsUser(victim)
	theirs.send(`{"method":"logs","params":{"name":"work","lines":1,"follow":true}}`)
	if failed := h.followAll(t, "work", []*rawConn{theirs}); failed > 0 {
		t.Errorf("another user's follow failed")
	}
	// And through the CLI, of a process that has exited.
	if _, errOut, code := h.ctlAs(victim, "run", "--dir", "/", "done", "--", "echo", "bye"); code != 0 {
		t.Fatalf("run done: %s", errOut)
	}
	h.waitExit("done")
	if out, errOut, code := h.ctlAs(victim, "logs", "-f", "done"); code != 0 || out != "bye\n" {
		t.Errorf("logs -f of another user = %q, %q, exit %d; want bye", out, errOut, code)
	}
}

// TestRedTeamStreamsPerUser: a user at --max-streams-per-user is refused
// one more streaming call (of any streaming method, `logs` included) with
// resource_exhausted naming the setting, another user is not, and a
// stream that ends, by its final line or by a disconnect, frees its slot.
// Before, streams were not counted.
func TestRedTeamStreamsPerUser(t *testing.T) {
	a := testutil.NewUser(t, "gsstrcap", "gsstr")
	b := testutil.NewUser(t, "gsstrok", "gsstr")
	h := newHarness(t, func(c *config.Config) { c.Group = a.Group })
	limit := h.cfg.Limits.StreamsPerUser
	if limit != 64 {
		t.Fatalf("--max-streams-per-user defaults to %d, want 64", limit)
	}
	for _, r := range []struct {
		u    testutil.User
		name string
	}{{a, "napper"}, {a, "short"}, {b, "theirs"}} {
		if _, errOut, code := h.ctlAs(r.u, "run", "--dir", "/", r.name, "--", "sh", "-c", "echo up; exec sleep 1000"); code != 0 {
			t.Fatalf("run %s: %s", r.name, errOut)
		}
	}

	// a's limit of streams: a follow of short, then events and follows of
	// napper; each has sent its first line, so each runs.
	short := h.rawAsUser(a)
	short.send(`{"method":"logs","params":{"name":"short","follow":true}}`)
	expectFirst(t, short, "up")
	var events []*rawConn
	for i, rc := range h.rawsAsUser(a, limit-1) {
		if i%2 == 0 {
			rc.send(`{"method":"events"}`)
			events = append(events, rc)
		} else {
			rc.send(`{"method":"logs","params":{"name":"napper","follow":true}}`)
			expectFirst(t, rc, "up")
		}
	}
	for _, rc := range events {
		expectFirst(t, rc, "")
	}

	probe := h.rawAsUser(a)
	refused := func(what string) {
		t.Helper()
		resp := probe.call(api.MethodLogs, map[string]any{"name": "napper"})
		if msg, _ := resp["error"].(string); resp["code"] != string(api.CodeResourceExhausted) || !strings.Contains(msg, "--max-streams-per-user") {
			t.Errorf("%s: logs = %v; want resource_exhausted naming --max-streams-per-user", what, resp)
		}
		if _, errOut, code := h.ctlAs(a, "wait", "napper", "--timeout", "1ms"); code == 0 || !strings.Contains(errOut, "max-streams-per-user") {
			t.Errorf("%s: wait = exit %d, %q; want refused naming --max-streams-per-user", what, code, errOut)
		}
	}
	refused(fmt.Sprintf("at %d streams", limit))
	if out, errOut, code := h.ctlAs(b, "logs", "theirs"); code != 0 || out != "up\n" {
		t.Errorf("another user's logs = %q, %q, exit %d; want up", out, errOut, code)
	}
	if lines, err := h.client().Logs(ctxT(t), "napper", 1); err != nil || len(lines) != 1 {
		t.Errorf("root's logs = %q, %v", lines, err)
	}

	// A stream that ends frees its slot before its final line.
	if _, errOut, code := h.ctlAs(a, "kill", "short"); code != 0 {
		t.Fatalf("kill: %s", errOut)
	}
	for {
		m := short.recv()
		if _, ok := m["event"]; ok {
			continue
		}
		if m["ok"] != true {
			t.Fatalf("the follow of short ended with %v", m)
		}
		break
	}
	if out, errOut, code := h.ctlAs(a, "logs", "napper"); code != 0 || out != "up\n" {
		t.Errorf("logs once a stream ended = %q, %q, exit %d; want up", out, errOut, code)
	}

	// So does one whose client goes away: back at the cap, a disconnect
	// lets the next call in once the daemon sees it.
	refill := h.rawAsUser(a)
	refill.send(`{"method":"events"}`)
	expectFirst(t, refill, "")
	refused(fmt.Sprintf("at %d streams again", limit))
	events[0].c.Close()
	waitFor(t, func() bool { return probe.call(api.MethodLogs, map[string]any{"name": "napper"})["ok"] == true })
}

// appendLog opens process name's log for appending, as its process
// writes it, until t ends.
func (h *harness) appendLog(t *testing.T, name string) *os.File {
	t.Helper()
	p, err := h.client().Process(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return log
}

// rawAsUser is a raw connection made by the test user u.
func (h *harness) rawAsUser(u testutil.User) *rawConn {
	h.t.Helper()
	return h.rawsAsUser(u, 1)[0]
}

// rawsAsUser is n raw connections made by the test user u.
func (h *harness) rawsAsUser(u testutil.User, n int) []*rawConn {
	h.t.Helper()
	osUser, err := user.Lookup(u.Name)
	if err != nil {
		h.t.Fatal(err)
	}
	var rcs []*rawConn
	for _, c := range connectManyAs(h.t, h.cfg.Socket, osUser, n, itoa(int(u.GroupGID))) {
		rcs = append(rcs, &rawConn{t: h.t, c: c, r: bufio.NewReaderSize(c, 1<<20)})
	}
	return rcs
}

// followAll checks that each follow of name asked for (with lines 1) on
// follows gets lines written to the log while it follows: a line appended
// after the follows were asked for arrives first, from the tail or the
// follow, then a second from the follow itself. It returns how many
// follows ended instead, reporting the first.
func (h *harness) followAll(t *testing.T, name string, follows []*rawConn) int {
	t.Helper()
	log := h.appendLog(t, name)
	failed := 0
	ok := make([]bool, len(follows))
	for i := range ok {
		ok[i] = true
	}
	for _, want := range []string{"first", "second"} {
		if _, err := log.WriteString(want + "\n"); err != nil {
			t.Fatal(err)
		}
		for i, rc := range follows {
			if !ok[i] {
				continue
			}
			m := rc.recv()
			ev, _ := m["event"].(map[string]any)
			if line, _ := ev["line"].(string); ev != nil && line == want {
				continue
			}
			if failed++; failed == 1 {
				t.Errorf("follow %d of %s: %v, want the line %q", i, name, m, want)
			}
			ok[i] = false
		}
	}
	return failed
}

// expectFirst reads a stream's first line: a log event with line, or any
// event when line is empty.
func expectFirst(t *testing.T, rc *rawConn, line string) {
	t.Helper()
	m := rc.recv()
	ev, _ := m["event"].(map[string]any)
	if got, _ := ev["line"].(string); ev == nil || (line != "" && got != line) {
		t.Fatalf("first line %v, want an event (%q)", m, line)
	}
}
