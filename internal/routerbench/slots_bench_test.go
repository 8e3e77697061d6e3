package routerbench_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// burstStreams, run as a local user, asks the model argv[2] at the router
// argv[1] for argv[3] streamed replies of 25 tokens at once and exits once
// all are answered.
const burstStreams = `
import http.client, json, sys, threading, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
body = json.dumps({"model": sys.argv[2], "stream": True, "max_tokens": 25, "messages": [{"role": "user", "content": "hi"}]})
def ask():
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    c.getresponse().read()
ts = [threading.Thread(target=ask) for _ in range(int(sys.argv[3]))]
for t in ts: t.start()
for t in ts: t.join()
`

// timedStream, run as a local user, asks the model argv[2] at the router
// argv[1] for one streamed reply of 50 tokens and prints the seconds it
// took, the interpreter's start not counted.
const timedStream = `
import json, sys, time, urllib.request
body = json.dumps({"model": sys.argv[2], "stream": True, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]}).encode()
start = time.monotonic()
r = urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}), timeout=600)
r.read()
print(time.monotonic() - start)
`

const (
	burstSize   = 64 // the hostile user's streams at once
	burstRounds = 3  // alternating rounds of each router
)

// BenchmarkRouterSlotsUnderBurst measures what one user's burst costs
// another user's request at a model server with four slots (the stand-in
// at --parallel 4, llama-server's -np 4, which queues the rest first come,
// first served): one user's 64 streams of 25 tokens 20 ms apart under way,
// another user's stream of 50 tokens is timed, through a router whose
// model has slots = 0 (the server's own queue alone) and one whose model
// has slots = 4 (shared between users), alternating, burstRounds each.
func BenchmarkRouterSlotsUnderBurst(b *testing.B) {
	testutil.RequiresRoot(b)
	for range b.N {
		e := newEnv(b)
		hog := testutil.NewUser(b, "gsbenchhog", "gsbenchhogg")
		victim := testutil.NewUser(b, "gsbenchvic", "gsbenchvicg")
		routers := map[string]string{}
		for _, slots := range []string{"0", "4"} {
			name := "slots" + slots
			port := testutil.FreePort(b)
			argv := []string{e.bins.SimJob, "--http", "${PORT}", "--vram", "512", "--model", name, "--parallel", "4", "--token-delay", "0.02"}
			config := filepath.Join(e.dir, name+".toml")
			text := fmt.Sprintf("[models.%s]\ncmd = %s\nport = %d\nvram = \"512M\"\nslots = %s\n", name, tomlStrings(argv), port, slots)
			if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
				b.Fatal(err)
			}
			routers[name], _ = e.launchRouter(e.bins.Router, config)
		}
		timed := func(base, model string) time.Duration {
			out, err := testutil.PythonOutputAs(victim, timedStream, base, model)
			secs, perr := strconv.ParseFloat(out, 64)
			if err != nil || perr != nil {
				b.Fatalf("%s's stream of %s: %v %s", victim.Name, model, err, out)
			}
			return time.Duration(secs * float64(time.Second))
		}
		alone, burst := map[string][]time.Duration{}, map[string][]time.Duration{}
		for range burstRounds {
			for _, model := range []string{"slots0", "slots4"} {
				base := routers[model]
				alone[model] = append(alone[model], timed(base, model))
				hogCmd := testutil.PythonCmdAs(hog, burstStreams, base, model, strconv.Itoa(burstSize))
				if err := hogCmd.Start(); err != nil {
					b.Fatal(err)
				}
				e.awaitInFlight(base, model, burstSize)
				burst[model] = append(burst[model], timed(base, model))
				if err := hogCmd.Wait(); err != nil {
					b.Fatalf("%s's burst: %v", hog.Name, err)
				}
			}
		}
		for _, model := range []string{"slots0", "slots4"} {
			b.Logf("%s: another user's 50-token stream alone %v, under one user's burst of %d streams %v (median of %d: %v)",
				model, median(alone[model]).Round(time.Millisecond), burstSize, median(burst[model]).Round(time.Millisecond), burstRounds, burst[model])
			b.ReportMetric(median(burst[model]).Seconds(), "s-burst-"+model)
		}
	}
}

// awaitInFlight polls the router's GET /running until model has n
// requests in flight: the burst is under way.
func (e *env) awaitInFlight(base, model string, n int) {
	e.b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		resp, err := e.oneShot.Get(base + "/running")
		if err != nil {
			e.b.Fatal(err)
		}
		var running struct {
			Running []struct {
				Model    string `json:"model"`
				InFlight int    `json:"in_flight"`
			} `json:"running"`
		}
		err = json.NewDecoder(resp.Body).Decode(&running)
		resp.Body.Close()
		if err != nil {
			e.b.Fatal(err)
		}
		for _, m := range running.Running {
			if m.Model == model && m.InFlight >= n {
				return
			}
		}
		if time.Now().After(deadline) {
			e.b.Fatalf("%s: fewer than %d requests in flight after a minute", model, n)
		}
	}
}
