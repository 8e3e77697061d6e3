package router_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// streams, run as a local user, asks model alpha for N streamed replies
// of 25 tokens at once and prints each one's status as it ends.
const streams = `
import http.client, json, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
body = json.dumps({"model": "alpha", "stream": True, "max_tokens": 25, "messages": [{"role": "user", "content": "hi"}]})
def ask():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    print(r.status, flush=True)
ts = [threading.Thread(target=ask) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
`

// TestRedTeamRouterSlotsPerUser: a model server runs a few requests at
// once (llama-server's --parallel slots) and queues the rest first come,
// first served, whoever sent them: one user's burst of requests put
// another user's one behind all of them. Now the router passes a model
// its slots' worth at once and gives each slot that frees to the waiting
// user holding the fewest: the other user's request goes next. Without
// the router's slots the other user's request is answered after all of
// the first user's (none left in flight); with them, after one.
func TestRedTeamRouterSlotsPerUser(t *testing.T) {
	const burst = 6
	g := newRig(t, "1x24G")
	hog := testutil.NewUser(t, "gsrslots", "gsrslotsg")
	// simjob's --parallel 1 is llama-server's -np 1: the router reads its
	// slots from it. 25 tokens 20 ms apart: each stream lasts 0.5 s.
	g.startRouter(g.simModelArgs("alpha", modelMiB, []string{"--parallel", "1", "--token-delay", "0.02"}))
	if status, body := g.chat("alpha"); status != 200 { // awake before the burst
		t.Fatalf("first request: %d %s", status, body)
	}
	_, lines := testutil.PythonAs(t, hog, streams, g.port(), fmt.Sprint(burst))
	// One stream holds the slot, the rest wait in the router.
	g.awaitRunning("alpha", func(s runningModel) bool { return s.InFlight == burst && s.Queued == burst-1 })
	if got := g.metric(`gpusched_router_queued{model="alpha"}`); got != fmt.Sprint(burst-1) {
		t.Errorf("gpusched_router_queued = %q, want %d", got, burst-1)
	}
	got, err := g.chatAs(g.otherUser(), "alpha", 2*time.Minute)
	after := g.runningModel("alpha")
	if err != nil || got != "200" {
		t.Fatalf("the other user's request: %v %s", err, got)
	}
	// In flight still: the burst's unanswered requests (and perhaps the
	// other user's own, answered but not yet counted out).
	if after.InFlight < burst-2 {
		t.Errorf("the other user's request was answered with %d of the burst's %d in flight; want it served after one of them (at least %d left)", after.InFlight, burst, burst-2)
	}
	for i := range burst {
		if !lines.Scan() || lines.Text() != "200" {
			t.Fatalf("the burst's request %d: %q; want each answered 200", i+1, lines.Text())
		}
	}
}

// TestRouterLearnsTheServersSlots: a model whose config sets no slots and
// whose cmd gives no number the router reads (a shell wrapping the server,
// llama-server's LLAMA_ARG_N_PARALLEL in the router's environment, here
// the stand-in's -parallel, a spelling the router does not read) has the
// number its server's GET /props gives once it woke: one user's three
// streams at a one-slot server, two of them wait in the router. Without
// the server's number, none waits there (no bound).
func TestRouterLearnsTheServersSlots(t *testing.T) {
	const burst = 3
	g := newRig(t, "1x24G")
	g.startRouter(g.simModelArgs("alpha", modelMiB, []string{"-parallel", "1", "--token-delay", "0.02"}))
	if s := g.runningModel("alpha"); s.Slots != 0 {
		t.Errorf("before its server told a number, /running shows %d slots; want 0 (no bound)", s.Slots)
	}
	if status, body := g.chat("alpha"); status != 200 {
		t.Fatalf("first request: %d %s", status, body)
	}
	if s := g.runningModel("alpha"); s.Slots != 1 {
		t.Errorf("/running shows %d slots; want the server's 1", s.Slots)
	}
	_, lines := testutil.PythonAs(t, g.otherUser(), streams, g.port(), fmt.Sprint(burst))
	g.awaitRunning("alpha", func(s runningModel) bool { return s.InFlight == burst && s.Queued == burst-1 })
	for i := range burst {
		if !lines.Scan() || lines.Text() != "200" {
			t.Fatalf("request %d: %q; want each answered 200", i+1, lines.Text())
		}
	}
}

// runningModel is one model of GET /running.
type runningModel struct {
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	Slots    int `json:"slots"`
}

// port is the router's TCP port.
func (g *rig) port() string { return g.url[len("http://127.0.0.1:"):] }

// runningModel reads model's line of GET /running.
func (g *rig) runningModel(model string) runningModel {
	g.t.Helper()
	out, code := curl(g.t, g.url+"/running")
	var all struct {
		Running []struct {
			Model string `json:"model"`
			runningModel
		} `json:"running"`
	}
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil {
		g.t.Fatalf("GET /running: curl %d, %v: %s", code, err, out)
	}
	for _, m := range all.Running {
		if m.Model == model {
			return m.runningModel
		}
	}
	g.t.Fatalf("GET /running has no model %q: %s", model, out)
	return runningModel{}
}

// awaitRunning polls GET /running until model's line satisfies ok: the
// router has no event stream to wait on.
func (g *rig) awaitRunning(model string, ok func(runningModel) bool) {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := g.runningModel(model)
		if ok(s) {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("model %s after 30s: %+v", model, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedTeamRouterSlotTurn: the router holds a model's slot until the
// reply has reached its client, so a user's long stream, left unread,
// held the slot, and with it the model, from every other user for as long
// as they liked (without the slot's turn, another user's request is not
// answered within 30 s). Now a request that has waited turn_timeout for a slot
// cuts one of a user holding more slots: the other user is answered, and
// the unread stream ends with an error event saying why.
func TestRedTeamRouterSlotTurn(t *testing.T) {
	g := newRig(t, "1x24G")
	hog := testutil.NewUser(t, "gsrslot2", "gsrslot2g")
	// One slot, and a stream of 4096 tokens 50 ms apart (205 s) that its
	// client stops reading: a reply longer than the sockets' buffers hold
	// keeps the slot as long as its client likes.
	g.startRouter("start_timeout = \"60s\"\nturn_timeout = \"2s\"\n" +
		g.simModelArgs("alpha", modelMiB, []string{"--parallel", "1", "--token-delay", "0.05"}))
	stdin, lines := testutil.PythonAs(t, hog, slowStream, g.port())
	if !lines.Scan() || lines.Text() != "streaming" {
		t.Fatalf("the user's stream: %q", lines.Text())
	}
	got, err := g.chatAs(g.otherUser(), "alpha", 30*time.Second)
	if err != nil || got != "200" {
		t.Fatalf("another user's request while the unread stream holds alpha's only slot: %v %s; want 200 after a turn", err, got)
	}
	fmt.Fprintln(stdin)
	if !lines.Scan() || !strings.Contains(lines.Text(), "event: error") || !strings.Contains(lines.Text(), "slots") {
		t.Fatalf("the cut stream ended with %q; want an error event naming the slots", lines.Text())
	}
	if got := g.metric(`gpusched_router_slot_cuts_total{model="alpha"}`); got != "1" {
		t.Errorf("slot cuts of alpha = %q, want 1", got)
	}
}
