package router_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// runningFlood, run as a local user, asks GET /running from 32 threads,
// each on a connection of its own, in a loop; it prints "flooding" once
// 320 have been answered, and on a line on stdin stops and prints how
// each was answered.
const runningFlood = `
import http.client, sys, threading
port = int(sys.argv[1])
stop, lock, counts = threading.Event(), threading.Lock(), {}
started = threading.Event()
def loop():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not stop.is_set():
        c.request("GET", "/running")
        r = c.getresponse()
        r.read()
        with lock:
            counts[r.status] = counts.get(r.status, 0) + 1
            if sum(counts.values()) >= 320 and not started.is_set():
                started.set()
                print("flooding", flush=True)
ts = [threading.Thread(target=loop) for _ in range(32)]
for t in ts: t.start()
sys.stdin.readline()
stop.set()
for t in ts: t.join()
print(" ".join("%d:%d" % kv for kv in sorted(counts.items())), flush=True)
`

// TestRedTeamRouterRunningFlood: GET /running asked the daemon about each
// model, on a connection of the router's user each time, for any local
// user: one user's loop of it held every connection the daemon allows the
// router's user (--max-conns-per-user), and another user's request that
// needed a wake was answered 503 ("user gsrouter has 16 connections open,
// the most --max-conns-per-user allows"; with the default 256, 400
// threads did it: 2026-11-29). Now one listing of the daemon's serves
// every /running request within a second: the other user's request is
// answered.
func TestRedTeamRouterRunningFlood(t *testing.T) {
	g := newRig(t, "1x24G", "--max-conns-per-user", "16")
	hog := testutil.NewUser(t, "gsrrun", "gsrrung")
	g.startRouter(g.simModel("alpha", 1024) + g.simModel("beta", 1024))
	if status, body := g.chat("alpha"); status != 200 {
		t.Fatalf("alpha: %d %s", status, body)
	}
	stdin, lines := testutil.PythonAs(t, hog, runningFlood, g.port())
	if !lines.Scan() || lines.Text() != "flooding" {
		t.Fatalf("the flood: %q", lines.Text())
	}
	got, err := g.chatAs(g.otherUser(), "beta", time.Minute)
	fmt.Fprintln(stdin)
	if err != nil || got != "200" {
		t.Fatalf("another user's request waking beta during the flood of GET /running: %v %s; want 200", err, got)
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "200:") || strings.Contains(lines.Text(), "502:") {
		t.Errorf("the flood's answers: %q; want 200 each (the daemon's listing shared)", lines.Text())
	}
}
