package router_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// upstreamCalls, run as a local user, sends each METHOD PATH of argv[2:]
// to the router at argv[1] and prints one "METHOD PATH STATUS" line each.
const upstreamCalls = `
import json, sys, urllib.request, urllib.error
body = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
for call in sys.argv[2:]:
    method, path = call.split(" ", 1)
    req = urllib.request.Request(sys.argv[1] + path, method=method, data=body if method == "POST" else None,
                                 headers={"Content-Type": "application/json"})
    try:
        status = urllib.request.urlopen(req, timeout=30).status
    except urllib.error.HTTPError as e:
        status = e.code
    print(call, status, flush=True)
`

// TestRedTeamRouterUpstreamIsNotEveryones: /upstream/NAME/PATH passed any
// method and path to a model's server, for any local user: another
// user's model server's slots (GET /slots lists each slot's task, and
// some versions of llama-server its prompt; POST /slots/ID?action=erase drops
// its cache), its LoRA adapters' scales for every request (POST
// /lora-adapters) and its settings (POST /props). Now a client other
// than root, the router's own user and upstream_users reaches only the
// server's generation endpoints and GETs of its health, models, props and
// metrics: the rest is answered 403 and never reaches the server.
func TestRedTeamRouterUpstreamIsNotEveryones(t *testing.T) {
	g := newRig(t, "1x24G")
	other := testutil.NewUser(t, "gsrup1", "gsrup1g")
	listed := testutil.NewUser(t, "gsrup2", "gsrup2g")
	g.startRouter("upstream_users = [\"gsrup2\"]\n" + g.simModel("alpha", 1024))
	calls := map[string]int{ // what another user gets
		"GET /upstream/alpha/health":                 200,
		"GET /upstream/alpha/v1/models":              200,
		"POST /upstream/alpha/v1/chat/completions":   200,
		"GET /upstream/alpha/slots":                  403,
		"POST /upstream/alpha/slots/0?action=erase":  403,
		"POST /upstream/alpha/lora-adapters":         403,
		"POST /upstream/alpha/props":                 403,
		"DELETE /upstream/alpha/v1/chat/completions": 403,
	}
	run := func(u testutil.User) map[string]int {
		t.Helper()
		args := []string{g.url}
		for c := range calls {
			args = append(args, c)
		}
		out, err := testutil.PythonOutputAs(u, upstreamCalls, args...)
		if err != nil {
			t.Fatalf("as %s: %v\n%s", u.Name, err, out)
		}
		got := map[string]int{}
		for _, line := range strings.Split(out, "\n") {
			i := strings.LastIndexByte(line, ' ')
			code, err := strconv.Atoi(line[i+1:])
			if err != nil {
				t.Fatalf("as %s: %q", u.Name, line)
			}
			got[line[:i]] = code
		}
		return got
	}
	got := run(other)
	for c, want := range calls {
		if got[c] != want {
			t.Errorf("another user's %s: %d, want %d", c, got[c], want)
		}
	}
	for _, u := range []testutil.User{listed, g.user} {
		if code := run(u)["GET /upstream/alpha/slots"]; code != 200 {
			t.Errorf("%s's GET /upstream/alpha/slots: %d, want 200 (upstream_users, the router's own user)", u.Name, code)
		}
	}
	if out, code := curl(t, "-o", "/dev/null", "-w", "%{http_code}", g.url+"/upstream/alpha/slots"); code != 0 || out != "200" {
		t.Errorf("root's GET /upstream/alpha/slots: curl %d, %s", code, out)
	}
}
