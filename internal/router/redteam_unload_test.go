package router_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// unloadAs, run as a local user, posts to URL and prints the answer's
// status and body.
const unloadAs = `
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=b"", method="POST"), timeout=30)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`

// TestRedTeamRouterUnloadIsNotEveryones: any local user may reach the
// router, and /unload froze every idle model for whoever asked: one
// user's loop of it froze a model between each of another user's
// requests, each of which then waited for a thaw (a victim's p99 4.2 ms
// alone, 127 ms under such a loop on simulated GPUs, 2026-11-28). The
// router freezes its own processes, which the daemon lets no other user
// do. Now /unload is root's, the router's own user's and unload_users':
// another user is answered 403 and the model left as it is.
func TestRedTeamRouterUnloadIsNotEveryones(t *testing.T) {
	g := newRig(t, "1x24G")
	hostile := testutil.NewUser(t, "gsrunl1", "gsrunl1g")
	listed := testutil.NewUser(t, "gsrunl2", "gsrunl2g")
	g.startRouter("unload_users = [\"gsrunl2\"]\n" + g.simModel("alpha", 1024))
	wake := func() {
		t.Helper()
		if code, body := g.chat("alpha"); code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
	}
	wake()
	for _, path := range []string{"/unload", "/unload/alpha"} {
		got, err := testutil.PythonOutputAs(hostile, unloadAs, g.url+path)
		if err != nil || !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "unload_users") {
			t.Fatalf("another user's POST %s: %v %s; want 403 naming unload_users", path, err, got)
		}
	}
	if p := g.process("alpha"); p.State != api.StateRunning {
		t.Fatalf("alpha is %s after another user's refused /unload; want it running", p.State)
	}
	for _, u := range []testutil.User{listed, g.user} {
		got, err := testutil.PythonOutputAs(u, unloadAs, g.url+"/unload/alpha")
		if err != nil || !strings.HasPrefix(got, `200 {"unloaded":["alpha"]}`) {
			t.Fatalf("%s's POST /unload/alpha: %v %s; want it frozen", u.Name, err, got)
		}
		g.awaitState("alpha", api.StateFrozen, 10*time.Second)
		wake()
	}
}
