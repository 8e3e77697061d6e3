package daemon

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestRedTeamCPUSharePerUser: a user whose bulk work (every line of a log)
// has used their share of the daemon's CPU (--max-cpu-per-user) waits
// before the next (a log, a submission, a removal, a process start), on any of their connections,
// without holding their one turn (--max-busy-per-user 1): their status is
// answered meanwhile, and other users and root are answered at once. The share here is a
// ten-thousandth of a CPU, a burst of 0.2 ms: one reply of 65,536 lines
// costs more than that, and the wait after it seconds.
func TestRedTeamCPUSharePerUser(t *testing.T) {
	alice, bob, carol := testutil.NewUser(t, "gscpu-a", "gscpu"), testutil.NewUser(t, "gscpu-b", "gscpu"), testutil.NewUser(t, "gscpu-c", "gscpu")
	dave := testutil.NewUser(t, "gscpu-d", "gscpu") // each other user makes one call: a second may wait for their own share
	h := newHarness(t, func(c *config.Config) { c.Group = "gscpu"; c.Limits.TurnsPerUser = 1 })
	for _, u := range []testutil.User{alice, bob} {
		if _, errOut, code := h.ctlAs(u, "run", "--dir", "/", "lines-"+u.Name, "--", "sh", "-c", "seq 100000; exec sleep 1000"); code != 0 {
			t.Fatalf("run as %s: %s", u.Name, errOut)
		}
		p, err := h.client().Process(ctxT(t), "lines-"+u.Name)
		if err != nil {
			t.Fatal(err)
		}
		awaitLogSize(t, p.Log, int64(len(seqOutput(100000))))
	}
	// The share, once the processes have started (a start is charged too).
	h.stop()
	h.cfg.Limits.CPUPerUser = 0.0001
	h.start()
	all := -1
	logsOf := func(u testutil.User) api.LogsParams { return api.LogsParams{Name: "lines-" + u.Name, Lines: &all} }

	a := h.rawsAsUser(alice, 7)
	if r := a[0].call(api.MethodLogs, logsOf(alice)); r["ok"] != true {
		t.Fatalf("alice's first logs: %v", r)
	}
	a[1].send(`{"id":2,"method":"logs","params":{"name":"lines-gscpu-a","lines":-1}}`)
	if err := a[1].silentFor(time.Second); err != nil {
		t.Fatalf("alice's second logs, on another connection, over her CPU share: %v", err)
	}
	for i, bulk := range []string{
		`{"id":4,"method":"submit","params":{"cmd":["true"],"dir":"/"}}`,
		`{"id":5,"method":"rm","params":{"exited":true}}`,
		`{"id":6,"method":"prune_jobs"}`,
		`{"id":7,"method":"run","params":{"name":"a-run","cmd":["sleep","1000"],"dir":"/"}}`,
	} {
		a[3+i].send(bulk)
		if err := a[3+i].silentFor(time.Second); err != nil {
			t.Fatalf("alice's %s over her CPU share: %v", bulk, err)
		}
	}
	a[2].send(`{"id":3,"method":"status"}`)
	a[2].c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := a[2].r.ReadString('\n'); err != nil || !strings.Contains(line, `"ok":true`) {
		t.Fatalf("alice's status while her logs waits for her share: %q, %v", line, err)
	}
	if _, errOut, code := h.ctlAs(carol, "submit", "--dir", "/", "--", "true"); code != 0 {
		t.Fatalf("carol's submit while alice waits: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(dave, "run", "--dir", "/", "d-run", "--", "sleep", "1000"); code != 0 {
		t.Fatalf("dave's run while alice waits: %s", errOut)
	}
	if r := h.rawAsUser(bob).call(api.MethodLogs, logsOf(bob)); r["ok"] != true {
		t.Fatalf("bob's logs while alice waits: %v", r)
	}
	if _, err := h.client().Logs(ctxT(t), "lines-"+alice.Name, -1); err != nil {
		t.Fatalf("root's logs while alice waits: %v", err)
	}
	if _, err := h.client().Remove(ctxT(t), api.RmParams{Exited: true}); err != nil {
		t.Fatalf("root's rm --exited while alice waits: %v", err)
	}
	if _, err := h.client().PruneJobs(ctxT(t), api.PruneJobsParams{}); err != nil {
		t.Fatalf("root's jobs prune while alice waits: %v", err)
	}
}

// seqOutput is what seq 1..n writes.
func seqOutput(n int) string {
	var b []byte
	for i := 1; i <= n; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return string(b)
}

// awaitLogSize waits until the log at path holds size bytes.
func awaitLogSize(t *testing.T, path string, size int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(path); err == nil && fi.Size() >= size {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %d bytes", path, size)
		}
	}
}

// TestRedTeamFollowHeldToTheShare: what a real user's `logs -f` relays as
// their process writes is charged to their share of the daemon's CPU
// (--max-cpu-per-user): once over it, their follow waits between pieces,
// while root's follow of the same log, held to no share, gets every line.
// The share is a ten-thousandth of a CPU, a burst of 0.2 ms: relaying
// 200,000 lines costs some hundred times that, and the wait after a piece
// seconds, so in the 2 s looked at the user gets a piece or nothing (both
// seen), in order. TestFollowHeldToTheCallersShare tests the same with a
// stand-in budget, and that a held follow goes on.
func TestRedTeamFollowHeldToTheShare(t *testing.T) {
	const total = 200_000
	alice := testutil.NewUser(t, "gsfol-a", "gsfol")
	h := newHarness(t, func(c *config.Config) { c.Group = "gsfol" })
	if _, errOut, code := h.ctlAs(alice, "run", "--dir", "/", "writer", "--", "sh", "-c", "echo up; exec sleep 1000"); code != 0 {
		t.Fatalf("run as %s: %s", alice.Name, errOut)
	}
	waitLogged(t, h, "writer", "up")
	h.stop() // the share, once the process has started (a start is charged too)
	h.cfg.Limits.CPUPerUser = 0.0001
	h.start()

	theirs := h.rawAsUser(alice)
	theirs.send(`{"id":1,"method":"logs","params":{"name":"writer","lines":1,"follow":true}}`)
	expectFirst(t, theirs, "up")
	rootUp, rootDone := make(chan struct{}), make(chan error, 1)
	go func() {
		n := -1
		rootDone <- h.client().FollowLogs(ctxT(t), "writer", 1, func(l string) error {
			if n++; n == 0 {
				close(rootUp)
				return nil
			}
			if want := strconv.Itoa(n); l != want {
				return errors.New("root's line " + want + " is " + strconv.Quote(l))
			}
			if n == total {
				return errFollowDone
			}
			return nil
		})
	}()
	<-rootUp

	if _, err := h.appendLog(t, "writer").WriteString(seqOutput(total)); err != nil {
		t.Fatal(err)
	}
	if err := <-rootDone; !errors.Is(err, errFollowDone) {
		t.Fatalf("root's follow: %v", err)
	}

	// Root has every line; the user, over their share, a piece at most.
	got := 0
	theirs.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	for {
		line, err := theirs.r.ReadBytes('\n')
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("the user's follow after %d lines: %v", got, err)
		}
		var m struct {
			Event *struct{ Line string } `json:"event"`
		}
		if err := json.Unmarshal(line, &m); err != nil || m.Event == nil {
			t.Fatalf("the user's follow after %d lines: %q", got, line)
		}
		if got++; m.Event.Line != strconv.Itoa(got) {
			t.Fatalf("the user's line %d is %q", got, m.Event.Line)
		}
	}
	if got == total {
		t.Fatalf("the user's follow relayed all %d lines by the time root's had them and 2 s more; want it held to their share", total)
	}
	t.Logf("the user's follow relayed %d of %d lines", got, total)
}

// errFollowDone ends a follow that has every line it waited for.
var errFollowDone = errors.New("every line")
