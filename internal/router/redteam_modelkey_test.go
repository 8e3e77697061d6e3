package router_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// directChat, run as a local user, asks the model server at URL for a
// chat completion past the router and prints the status.
const directChat = `
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/chat/completions",
        data=b'{"messages": [{"role": "user", "content": "hi"}]}', headers={"Content-Type": "application/json"}), timeout=30)
    print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
`

// TestRedTeamModelServerOnlyThroughTheRouter: a model server listens on
// loopback, where every local user may reach it past the router, its
// api_keys, shares, /unload rules and turns (another user's direct
// request was answered 200). With model_key, the router starts the
// server with the key in model_key_env (llama-server's LLAMA_API_KEY, in
// the environment, not the world-readable command line) and sends it with
// every request: routed requests are answered, direct ones 401.
func TestRedTeamModelServerOnlyThroughTheRouter(t *testing.T) {
	g := newRig(t, "1x24G")
	other := testutil.NewUser(t, "gsrdirect", "gsrdirectg")
	port := testutil.FreePort(t)
	g.startRouter(fmt.Sprintf(`model_key = "sk-model-0123456789abcdef"
[models.alpha]
cmd = [%q, "--http", "${PORT}", "--vram", "1024", "--model", "alpha"]
port = %d
model_key_env = "LLAMA_API_KEY"
`, g.bins.SimJob, port))
	if code, body := g.chat("alpha"); code != 200 {
		t.Fatalf("a routed request: %d %s", code, body)
	}
	if got, err := testutil.PythonOutputAs(other, directChat, fmt.Sprintf("http://127.0.0.1:%d", port)); err != nil || got != "401" {
		t.Fatalf("another user's request to the model server past the router: %v %s; want 401", err, got)
	}
	if p := g.process("alpha"); strings.Contains(strings.Join(p.Cmd, " "), "sk-model") {
		t.Fatalf("the key is on the model's command line: %q", p.Cmd)
	}
}
