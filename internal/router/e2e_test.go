package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/router"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// Two 13 GiB models on one 24 GiB GPU: they cannot be resident together.
const modelMiB = 13 << 10

// TestRouterSwapsTwoModels: alternating requests start each model cold
// once, then swap them by freeze and thaw; the models are the router
// user's managed processes named after them; streaming passes through;
// /v1/models, /running, /unload and /metrics say what happened.
func TestRouterSwapsTwoModels(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter(g.simModel("alpha", modelMiB, `aliases = ["a"]`) + g.simModel("beta", modelMiB))

	want := map[string]api.State{}
	for i, ask := range [][2]string{{"alpha", "alpha"}, {"beta", "beta"}, {"a", "alpha"}, {"beta", "beta"}} {
		name, model := ask[0], ask[1]
		code, body := g.chat(name)
		if code != 200 || !strings.Contains(body, model) {
			t.Fatalf("request %d for %s: %d %s", i, name, code, body)
		}
		if other := map[string]string{"alpha": "beta", "beta": "alpha"}[model]; want[other] != "" {
			want[other] = api.StateFrozen
		}
		want[model] = api.StateRunning
		for n, s := range want {
			if p := g.process(n); p.State != s || p.User != g.user.Name {
				t.Fatalf("after request %d for %s: %s is %s of %s, want %s of %s", i, name, n, p.State, p.User, s, g.user.Name)
			}
		}
	}
	for series, want := range map[string]string{
		`gpusched_router_wake_seconds_count{model="alpha",tier="cold"}`:   "1",
		`gpusched_router_wake_seconds_count{model="beta",tier="cold"}`:    "1",
		`gpusched_router_wake_seconds_count{model="alpha",tier="frozen"}`: "1",
		`gpusched_router_wake_seconds_count{model="beta",tier="frozen"}`:  "1",
		`gpusched_router_requests_total{code="200",model="alpha"}`:        "2",
		`gpusched_router_in_flight{model="alpha"}`:                        "0",
	} {
		if got := g.metric(series); got != want {
			t.Errorf("%s = %q, want %s", series, got, want)
		}
	}

	// Streaming through Python's urllib: the events arrive as the server
	// sends them, ending with [DONE].
	out := g.python(`
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", method="POST",
    data=json.dumps({"model": "alpha", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=30) as r:
    print(r.headers["Content-Type"])
    events = [l for l in r if l.startswith(b"data: ")]
print(len(events), events[-1].decode().strip())
`)
	if !strings.HasPrefix(out, "text/event-stream") || !strings.Contains(out, "data: [DONE]") {
		t.Errorf("stream through the router: %q", out)
	}

	var models struct {
		Data []struct{ ID string } `json:"data"`
	}
	body, _ := curl(t, g.url+"/v1/models")
	if err := json.Unmarshal([]byte(body), &models); err != nil || len(models.Data) != 2 || models.Data[0].ID != "alpha" || models.Data[1].ID != "beta" {
		t.Errorf("/v1/models: %v %s", err, body)
	}
	body, _ = curl(t, g.url+"/running")
	if !strings.Contains(body, `"model":"alpha","state":"running"`) || !strings.Contains(body, `"model":"beta","state":"frozen"`) {
		t.Errorf("/running: %s", body)
	}

	// The user sees its models with gpuschedctl, and /unload freezes one.
	ps := g.ctlAsUser("ps")
	if !strings.Contains(ps, "alpha") || !strings.Contains(ps, "beta") {
		t.Errorf("gpuschedctl ps as %s:\n%s", g.user.Name, ps)
	}
	if body, _ := curl(t, "-XPOST", g.url+"/unload/alpha"); !strings.Contains(body, `"unloaded":["alpha"]`) {
		t.Errorf("/unload/alpha: %s", body)
	}
	if p := g.process("alpha"); p.State != api.StateFrozen {
		t.Errorf("after /unload/alpha: alpha is %s", p.State)
	}
	if body, _ := curl(t, "-w", "%{http_code}", "-XPOST", g.url+"/unload/nope"); !strings.HasSuffix(body, "404") {
		t.Errorf("/unload/nope: %s", body)
	}
	if code, body := g.chat("nope"); code != 404 || !strings.Contains(body, `no model \"nope\"`) {
		t.Errorf("unknown model: %d %s", code, body)
	}
}

// TestRouterConcurrentRequests: requests that arrive while their model
// wakes wait for the one wake; requests for two models that cannot be
// resident together are all served, in turns, without thrashing.
func TestRouterConcurrentRequests(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter(g.simModel("alpha", modelMiB) + g.simModel("beta", modelMiB))
	program := `
import json, sys, threading, urllib.request
def ask(model, out, i):
    req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            out[i] = "%d %s" % (r.status, model in r.read().decode())
    except Exception as e:
        out[i] = repr(e)
models = sys.argv[2].split(",")
out = [None] * len(models)
ts = [threading.Thread(target=ask, args=(m, out, i)) for i, m in enumerate(models)]
for t in ts: t.start()
for t in ts: t.join()
print("\n".join(out))
`
	run := func(models string) {
		t.Helper()
		cmd := exec.Command("python3", "-c", program, g.url, models)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%s", err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "200 True" {
				t.Fatalf("a request failed: %q in\n%s", l, out)
			}
		}
	}
	run(strings.TrimSuffix(strings.Repeat("alpha,", 8), ","))
	if got := g.metric(`gpusched_router_wake_seconds_count{model="alpha",tier="cold"}`); got != "1" {
		t.Errorf("8 concurrent requests to a cold model: %s cold wakes, want 1", got)
	}
	if p := g.process("alpha"); p.State != api.StateRunning {
		t.Errorf("alpha is %s", p.State)
	}

	run(strings.TrimSuffix(strings.Repeat("alpha,beta,", 10), ","))
	wakes := 0
	for _, m := range []string{"alpha", "beta"} {
		for _, tier := range []string{"cold", "frozen"} {
			n := 0
			fmt.Sscan(g.metric(fmt.Sprintf(`gpusched_router_wake_seconds_count{model=%q,tier=%q}`, m, tier)), &n)
			wakes += n
		}
	}
	// 20 interleaved requests, TurnBound 32 per turn: alpha's cold start
	// above, then at most one turn each (a swap to beta and perhaps back).
	if wakes < 2 || wakes > 4 {
		t.Errorf("20 interleaved requests made %d wakes (cold or frozen), want 2 to 4: thrashing", wakes)
	}
}

// TestRouterIdleTTLAndCrash: an idle model is frozen after its ttl; a model
// killed while serving answers 502 (or an SSE error event) and the next
// request starts it again.
func TestRouterIdleTTLAndCrash(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter(g.simModel("alpha", modelMiB, `ttl = "1s"`))
	if code, body := g.chat("alpha"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	g.awaitState("alpha", api.StateFrozen, 20*time.Second)
	if got := g.metric(`gpusched_router_unloads_total{model="alpha"}`); got != "1" {
		t.Errorf("unloads = %q, want 1", got)
	}

	// Killed while idle: the next request starts it cold.
	if _, err := g.client().Kill(t.Context(), api.KillParams{Name: "alpha", Signal: "SIGKILL"}); err != nil {
		t.Fatal(err)
	}
	g.awaitState("alpha", api.StateExited, 20*time.Second)
	if code, body := g.chat("alpha"); code != 200 || !strings.Contains(body, "alpha") {
		t.Fatalf("after a crash: %d %s", code, body)
	}

	// Crashing mid-stream: the stream ends with an error event; the next
	// request starts it again.
	out := g.python(`
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", method="POST",
    data=json.dumps({"model": "alpha", "stream": True, "messages": [{"role": "user", "content": "CRASH"}]}).encode())
with urllib.request.urlopen(req, timeout=30) as r:
    print(r.read().decode())
`)
	if !strings.Contains(out, "event: error") || !strings.Contains(out, `its server failed mid-stream`) {
		t.Errorf("a stream its server crashed in: %q", out)
	}
	if code, body := g.chat("alpha"); code != 200 || !strings.Contains(body, "alpha") {
		t.Fatalf("after a crash mid-stream: %d %s", code, body)
	}
	// Crashing mid-reply: 502, and the next request starts it again.
	if code, body := g.chatSaying("alpha", "CRASH"); code != 502 || !strings.Contains(body, `its server failed the request`) {
		t.Errorf("a reply its server crashed in: %d %s, want 502", code, body)
	}
	if code, body := g.chat("alpha"); code != 200 || !strings.Contains(body, "alpha") {
		t.Fatalf("after a crash mid-reply: %d %s", code, body)
	}
	if got := g.metric(`gpusched_router_wake_seconds_count{model="alpha",tier="cold"}`); got != "4" {
		t.Errorf("cold wakes = %q, want 4 (the first, and after each of 3 crashes)", got)
	}
	if got := g.metric(`gpusched_router_upstream_errors_total{model="alpha"}`); got != "2" {
		t.Errorf("upstream errors = %q, want 2", got)
	}
}

// TestRouterClientHangUpCancelsUpstream: a client that hangs up in the
// middle of a stream ends the model server's request too: it stops
// generating, and says after how many tokens.
func TestRouterClientHangUpCancelsUpstream(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter(g.simModelArgs("alpha", modelMiB, []string{"--token-delay", "0.01"}))
	const tokens = 1000 // 10 s of tokens
	out := g.python(fmt.Sprintf(`
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", method="POST",
    data=json.dumps({"model": "alpha", "stream": True, "max_tokens": %d, "messages": [{"role": "user", "content": "hi"}]}).encode())
r = urllib.request.urlopen(req, timeout=30)
while not r.readline().startswith(b"data: "):
    pass
r.close()
print("hung up")
`, tokens))
	if !strings.Contains(out, "hung up") {
		t.Fatalf("client: %q", out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var line string
	err := g.client().FollowLogs(ctx, "alpha", 100, func(l string) error {
		if strings.HasPrefix(l, "simjob: client hung up after") {
			line = l
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		t.Fatalf("the model server never saw the hang-up (it would generate all %d tokens): %v", tokens, err)
	}
	var sent, of int
	if _, err := fmt.Sscanf(line, "simjob: client hung up after %d of %d tokens", &sent, &of); err != nil || sent >= of {
		t.Errorf("model server: %q", line)
	}
}

var errFound = errors.New("found")

// TestRouterAPIKeysAndBadRequests: with keys, every endpoint but /health
// needs one, as a bearer token or x-api-key; a body over max_body, not
// JSON or naming no model is refused with a clear error.
func TestRouterAPIKeysAndBadRequests(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter("api_keys = [\"sk-router-test-1\"]\nmax_body = \"1M\"\n" + g.simModel("alpha", 1024))
	big := filepath.Join(g.dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"model":"alpha","pad":"`+strings.Repeat("x", 1<<20)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want int
	}{
		{nil, 401},
		{[]string{"-H", "Authorization: Bearer sk-wrong-key-1"}, 401},
		{[]string{"-H", "Authorization: Bearer sk-router-test-1"}, 200},
		{[]string{"-H", "x-api-key: sk-router-test-1"}, 200},
	} {
		if code, body := g.chat("alpha", tc.args...); code != tc.want {
			t.Errorf("%v: %d %s, want %d", tc.args, code, body, tc.want)
		}
	}
	if body, _ := curl(t, "-w", "%{http_code}", g.url+"/health"); body != "OK\n200" {
		t.Errorf("/health without a key: %q", body)
	}
	if body, _ := curl(t, "-w", "%{http_code}", g.url+"/metrics"); !strings.HasSuffix(body, "401") {
		t.Errorf("/metrics without a key: %q", body)
	}
	key := []string{"-H", "x-api-key: sk-router-test-1"}
	for _, tc := range []struct{ body, want string }{
		{"@" + big, `413 request body is larger than 1048576 bytes`},
		{`model=alpha`, `400 the body is not a JSON object`},
		{`{"messages":[]}`, `400 the body names no \"model\"`},
		{`{"model":"beta"}`, `404 no model \"beta\" here`},
	} {
		cmd := exec.Command("curl", append(key, "-sS", "--max-time", "10", "-w", "\n%{http_code}", "--data-binary", tc.body, g.url+"/v1/chat/completions")...)
		b, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		i := strings.LastIndexByte(string(b), '\n')
		got := string(b[i+1:]) + " " + string(b[:i])
		code, msg, _ := strings.Cut(tc.want, " ")
		if !strings.HasPrefix(got, code) || !strings.Contains(got, msg) {
			t.Errorf("body %.40q: %s, want %s", tc.body, got, tc.want)
		}
	}
}

// TestRouterLeavesOtherUsersAlone: the router acts only as its user. A
// model that does not fit beside another user's process gets 503 after
// start_timeout, and that process is untouched. Another user's process
// named like a model, started first, neither keeps the model from its
// requests (names are per user) nor is replaced.
func TestRouterLeavesOtherUsersAlone(t *testing.T) {
	g := newRig(t, "1x24G")
	other := g.otherUser()
	g.runAs(other, "hog", modelMiB)
	g.runAs(other, "beta", 512)
	g.startRouter(`start_timeout = "2s"` + "\n" + g.simModel("alpha", modelMiB) + g.simModel("beta", 512))
	if code, body := g.chat("alpha"); code != 503 || !strings.Contains(body, "no room") {
		t.Errorf("alpha beside another user's 13 GiB: %d %s, want 503 no room", code, body)
	}
	if code, body := g.chat("beta"); code != 200 {
		t.Errorf("beta, a name another user took first: %d %s, want 200", code, body)
	}
	for _, n := range []string{"hog", "beta"} {
		if p := g.process(other.Name + "/" + n); p.State != api.StateRunning || p.User != other.Name {
			t.Errorf("%s is %s of %s, want running of %s", n, p.State, p.User, other.Name)
		}
	}
	if p := g.process(g.user.Name + "/beta"); p.State != api.StateRunning {
		t.Errorf("the router's beta is %s, want running", p.State)
	}
}

// TestRouterBadConfig: the binary refuses a bad config, naming the file,
// the line and the key, and serves nothing.
func TestRouterBadConfig(t *testing.T) {
	g := newRig(t, "1x24G")
	path := g.writeConfig(g.simModel("alpha", 1024, `ttl = "5 minutes"`))
	cmd := g.routerCmd("--config", path)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("router on a bad config: %v\n%s", err, out)
	}
	if want := path + `:5: models.alpha.ttl: bad duration "5 minutes"`; !strings.Contains(string(out), want) {
		t.Errorf("output %q does not name %q", out, want)
	}
}

// TestRouterHibernatedWake: a frozen model goes to disk after its
// hibernate time (the daemon's ttl policy) and a request restores it.
func TestRouterHibernatedWake(t *testing.T) {
	testutil.CRIU(t)
	g := newRig(t, "1x24G")
	g.startRouter(g.simModel("alpha", 1024, `hibernate = "500ms"`))
	if code, body := g.chat("alpha"); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	if body, _ := curl(t, "-XPOST", g.url+"/unload/alpha"); !strings.Contains(body, `"unloaded":["alpha"]`) {
		t.Fatalf("/unload/alpha: %s", body)
	}
	// The policy's failures change only the process's note, which no event
	// reports: look at it until it is hibernated or says why not.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p := g.process("alpha")
		if p.State == api.StateHibernated {
			break
		}
		if strings.Contains(p.Note, "cannot image on this kernel") {
			t.Skipf("this kernel's CRIU cannot image a listening TCP socket (CRIU before 4.2 on Linux 6.16+, criu#2718, or no inet_diag): %s", p.Note)
		}
		if time.Now().After(deadline) {
			t.Fatalf("alpha not hibernated after 60s: %s, note %q", p.State, p.Note)
		}
	}
	if code, body := g.chat("alpha"); code != 200 || !strings.Contains(body, "alpha") {
		t.Fatalf("from disk: %d %s", code, body)
	}
	if got := g.metric(`gpusched_router_wake_seconds_count{model="alpha",tier="hibernated"}`); got != "1" {
		t.Errorf("hibernated wakes = %q, want 1", got)
	}
	if p := g.process("alpha"); p.State != api.StateRunning || p.Policy.TTL != api.Duration(500*time.Millisecond) {
		t.Errorf("alpha is %s with policy %+v", p.State, p.Policy)
	}
}

// TestRouterTurnBound: a model under a steady stream of requests still
// yields its GPU to another that waits, after at most TurnBound more.
func TestRouterTurnBound(t *testing.T) {
	g := newRig(t, "1x24G")
	g.startRouter(g.simModelArgs("alpha", modelMiB, []string{"--token-delay", "0.005"}) + g.simModel("beta", modelMiB))
	out := g.python(`
import json, sys, threading, time, urllib.request
def ask(model, stream=False):
    req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", method="POST",
        data=json.dumps({"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}).encode())
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        return r.status
ask("alpha")
stop, served = threading.Event(), [0] * 8
def flood(i):
    while not stop.is_set():
        ask("alpha", stream=True)  # --token-delay apart: always some in flight
        served[i] += 1
ts = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(8)]
for t in ts: t.start()
time.sleep(0.3)  # the flood is under way (not a synchronisation: any moment of it will do)
before = sum(served)
status = ask("beta")
during = sum(served) - before
stop.set()
for t in ts: t.join()
print(status, during)
`)
	var status, during int
	if _, err := fmt.Sscan(out, &status, &during); err != nil || status != 200 {
		t.Fatalf("beta during alpha's flood: %q", out)
	}
	// alpha admitted at most TurnBound requests of its hold, plus those of
	// the hold beta's wake found in flight, before beta got the GPU.
	if during > 2*router.TurnBound+8 {
		t.Errorf("alpha served %d requests while beta waited, want at most about %d", during, 2*router.TurnBound)
	}
}
