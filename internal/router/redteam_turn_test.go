package router_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// slowStream, run as a local user, asks model alpha for a long streamed
// reply, prints its first event and reads no more until a line on stdin;
// then it reads the rest of the reply and prints its last event but
// [DONE].
const slowStream = `
import http.client, json, socket, sys
body = json.dumps({"model": "alpha", "stream": True, "max_tokens": 4096, "messages": [{"role": "user", "content": "hi"}]})
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=60)
c.connect()
c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
r = c.getresponse()
while not r.readline().startswith(b"data: "):
    pass
print("streaming", flush=True)
sys.stdin.readline()
events = [e for e in r.read().decode(errors="replace").split("\n\n") if e.strip() and "[DONE]" not in e]
print(events[-1].replace("\n", " "), flush=True)
`

// TestRedTeamRouterTurnTimeout: a model held by a request in flight kept
// its GPUs for as long as that request lasted: one user's streamed reply,
// long or read slowly, held a model, and so every model sharing its GPU
// away from everyone (another user's request for such a model was
// answered 503 after start_timeout, 2026-11-28). Now once another model
// waits for the GPU, the held model's requests have turn_timeout to
// finish: past it they are cut (the stream ends with an error event
// saying so), the waiting model wakes and is served.
func TestRedTeamRouterTurnTimeout(t *testing.T) {
	g := newRig(t, "1x24G")
	hog := testutil.NewUser(t, "gsrturn", "gsrturng")
	g.startRouter("start_timeout = \"30s\"\nturn_timeout = \"2s\"\n" +
		g.simModelArgs("alpha", 16384, []string{"--token-delay", "0.05"}) + g.simModel("beta", 16384))
	port := strings.TrimPrefix(g.url, "http://127.0.0.1:")
	stdin, lines := testutil.PythonAs(t, hog, slowStream, port)
	if !lines.Scan() || lines.Text() != "streaming" {
		t.Fatalf("the user's stream: %q", lines.Text())
	}
	start := time.Now()
	if got, err := g.chatAs(g.otherUser(), "beta", time.Minute); err != nil || got != "200" {
		t.Fatalf("another user's request for beta while alpha streams on the GPU: %v %s (after %v); want 200 once alpha's turn is over", err, got, time.Since(start).Round(time.Millisecond))
	}
	fmt.Fprintln(stdin)
	if !lines.Scan() || !strings.Contains(lines.Text(), "event: error") || !strings.Contains(lines.Text(), "turn_timeout") {
		t.Fatalf("the cut stream ended with %q; want an error event naming turn_timeout", lines.Text())
	}
	if got := g.metric(`gpusched_router_turn_cuts_total{model="alpha"}`); got != "1" {
		t.Errorf("turn cuts of alpha = %q, want 1", got)
	}
}

// hangServer is a model server that answers its health path and never
// answers a POST: a model thinking for ever before its reply's first byte.
const hangServer = `
import http.server, sys, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"OK\n")
    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(3600)
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// TestRouterTurnTimeoutAnswersWhatItCuts: a request cut before its reply
// began is answered 503, saying why, not left without an answer.
func TestRouterTurnTimeoutAnswersWhatItCuts(t *testing.T) {
	g := newRig(t, "1x24G")
	script := filepath.Join(g.dir, "hang.py")
	if err := os.WriteFile(script, []byte(hangServer), 0o644); err != nil {
		t.Fatal(err)
	}
	// The tree holds 16 GiB through a simulated job beside its server.
	alpha := fmt.Sprintf("[models.alpha]\ncmd = [\"/bin/sh\", \"-c\", %q]\nport = %d\nvram = \"16384M\"\n",
		fmt.Sprintf("%s --vram 16384 & exec /usr/bin/python3 %s ${PORT}", g.bins.SimJob, script), testutil.FreePort(t))
	g.startRouter("start_timeout = \"30s\"\nturn_timeout = \"2s\"\n" + alpha + g.simModel("beta", 16384))
	asked := make(chan string, 1)
	go func() {
		out, _ := g.chatAs(g.otherUser(), "alpha", time.Minute)
		asked <- out
	}()
	g.awaitInFlight("alpha")
	if code, body := g.chat("beta"); code != 200 {
		t.Fatalf("beta while alpha thinks for ever: %d %s", code, body)
	}
	if got := <-asked; !strings.HasPrefix(got, "503 ") || !strings.Contains(got, "turn_timeout") {
		t.Fatalf("the request cut while alpha thought: %q; want 503 naming turn_timeout", got)
	}
}

// awaitInFlight waits until a request for model is in flight (admitted,
// not answered).
func (g *rig) awaitInFlight(model string) {
	g.t.Helper()
	series := fmt.Sprintf("gpusched_router_in_flight{model=%q}", model)
	for deadline := time.Now().Add(30 * time.Second); g.metric(series) != "1"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			g.t.Fatalf("no request for %s in flight after 30s", model)
		}
	}
}
