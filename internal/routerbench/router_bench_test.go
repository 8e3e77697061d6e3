package routerbench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/router"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// profileEnv names a file for a CPU profile of the router's whole run
// (router.ProfileEnv), when set.
const profileEnv = "GPUSCHED_BENCH_ROUTER_PROFILE"

const (
	modelMiB    = 13 * 1024 // two do not fit on one 24 GiB GPU
	loadSeconds = "10"      // a cold start's simulated weight loading
	swaps       = 10        // frozen wakes measured per path
	throughputN = 1000      // requests per worker in the no-op requests/s runs
	workers     = 4
	// The generating runs: streamed replies of genTokens tokens, tokenDelay
	// apart (a model's time per token), from genWorkers clients at once.
	genTokens  = 16
	genWorkers = 16
	genN       = 20
	tokenDelay = "0.005"
)

// BenchmarkRouter measures, in one run on one simulated 24 GiB GPU with two
// 13 GiB models: time to first byte through the router for a cold, a
// frozen and a hibernated model, and for llama-swap's swap (kill the other
// model, start this one cold, wait for health, request); the router's own
// latency over a direct activate plus request; and proxied requests/s
// against direct ones to the same model server: the headline for streamed
// replies of genTokens tokens tokenDelay apart (a server that generates),
// and the worst case for quick replies (a server that does no work), with
// the CPU time per request of the router, the model server, the clients
// and the daemon, which bounds that ratio when the CPUs are the
// bottleneck. With GPUSCHED_BENCH_ROUTER_PROFILE=FILE the router writes a
// CPU profile of its run to FILE.
func BenchmarkRouter(b *testing.B) {
	testutil.RequiresRoot(b)
	for range b.N {
		e := newEnv(b)
		e.run()
	}
}

// env is one machine: a daemon, the router's user, the router.
type env struct {
	b       *testing.B
	bins    testutil.Binaries
	dir     string
	sock    string
	daemon  *testutil.SimDaemon
	user    testutil.User
	c       *api.Client
	router  string // base URL
	rpid    int    // the router's pid
	config  string // the router's config file
	ports   map[string]int
	oneShot *http.Client // a connection per request, as a new client makes
}

func newEnv(b *testing.B) *env {
	b.Helper()
	e := &env{b: b, bins: testutil.Build(b), dir: testutil.ShortDir(b), ports: map[string]int{},
		oneShot: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 2 * time.Minute}}
	e.user = testutil.NewUser(b, "gsbench", "gsbenchtest")
	e.daemon = testutil.StartSimDaemon(b, e.bins, e.dir, "1x24G", e.user.Group, os.Stderr)
	e.sock = e.daemon.Socket
	c, err := api.Dial(context.Background(), e.sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	e.c = c
	return e
}

// simjob is the command line of a model server on port.
func (e *env) simjob(name string, port int, load string) []string {
	return []string{e.bins.SimJob, "--http", strconv.Itoa(port), "--vram", strconv.Itoa(modelMiB),
		"--model", name, "--load-seconds", load, "--token-delay", tokenDelay}
}

// startRouter runs gpusched-router as the user with models alpha and beta,
// each a 10 s cold start, and waits for its "serving" log line.
func (e *env) startRouter() {
	var env []string
	if prof := os.Getenv(profileEnv); prof != "" {
		// The router runs as the user: it writes into a file made for it.
		f, err := os.Create(prof)
		if err != nil {
			e.b.Fatal(err)
		}
		f.Close()
		if err := os.Chown(prof, int(e.user.UID), int(e.user.GID)); err != nil {
			e.b.Fatal(err)
		}
		env = append(env, router.ProfileEnv+"="+prof)
	}
	e.config = e.writeConfig()
	e.router, e.rpid = e.launchRouter(e.bins.Router, e.config, env...)
}

// writeConfig writes the router's config, models alpha and beta on ports
// of their own, and returns its path.
func (e *env) writeConfig() string {
	var cfg strings.Builder
	for _, name := range []string{"alpha", "beta"} {
		e.ports[name] = testutil.FreePort(e.b)
		argv := e.simjob(name, 0, loadSeconds)
		argv[2] = "${PORT}"
		fmt.Fprintf(&cfg, "[models.%s]\ncmd = %s\nport = %d\nvram = \"%dM\"\n\n", name, tomlStrings(argv), e.ports[name], modelMiB)
	}
	path := filepath.Join(e.dir, "router.toml")
	if err := os.WriteFile(path, []byte(cfg.String()), 0o644); err != nil {
		e.b.Fatal(err)
	}
	return path
}

// tomlStrings is argv as a TOML array of strings.
func tomlStrings(argv []string) string {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// launchRouter runs the router binary bin as the user with config, and
// returns its base URL and pid once it logs "serving".
func (e *env) launchRouter(bin, config string, env ...string) (string, int) {
	b := e.b
	port := testutil.FreePort(b)
	r := exec.Command(bin, "--config", config, "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--socket", e.sock)
	r.Dir = e.dir
	r.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, env...)
	r.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: e.user.UID, Gid: e.user.GID, Groups: e.user.Groups()}}
	stderr, err := r.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Process.Signal(syscall.SIGTERM); _ = r.Wait() })
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		var once sync.Once
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"msg":"serving"`) {
				once.Do(func() { close(serving) })
			}
		}
	}()
	select {
	case <-serving:
	case <-time.After(30 * time.Second):
		b.Fatalf("%s not serving after 30s", bin)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", port), r.Process.Pid
}

// ttfb sends a streamed chat request for model to base on a new connection
// and returns the time to the first byte of the reply, having checked that
// the whole reply came from that model.
func (e *env) ttfb(base, model string) time.Duration {
	e.b.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`, model)
	start := time.Now()
	resp, err := e.oneShot.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		e.b.Fatalf("requests to %s: %v", base, err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		e.b.Fatalf("requests to %s: %v", base, err)
	}
	d := time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(rest), `"content":"`+model+`:"`) || !strings.Contains(string(rest), "[DONE]") {
		e.b.Fatalf("%s at %s: %d %s%s %v", model, base, resp.StatusCode, first, rest, err)
	}
	return d
}

// healthy polls a model server's /health until it answers 200, as
// llama-swap waits for its checkEndpoint.
func (e *env) healthy(port int) {
	e.b.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if resp, err := e.oneShot.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
	}
	e.b.Fatalf("port %d not healthy within 2 minutes", port)
}

func (e *env) run() {
	b := e.b
	ctx := context.Background()
	e.startRouter()
	cold := e.ttfb(e.router, "alpha")
	coldSwap := e.ttfb(e.router, "beta") // freezes alpha to make room
	var frozen []time.Duration
	for i := range swaps {
		frozen = append(frozen, e.ttfb(e.router, []string{"alpha", "beta"}[i%2]))
	}
	// beta was asked last: alpha is frozen.
	hibernated, hibNote := time.Duration(0), ""
	if _, err := e.c.Hibernate(ctx, api.HibernateParams{Name: "alpha"}); err != nil {
		hibNote = err.Error()
	} else {
		hibernated = e.ttfb(e.router, "alpha")
	}

	// Requests/s to one model server, through the router and directly.
	e.ttfb(e.router, "alpha")
	directURL := fmt.Sprintf("http://127.0.0.1:%d", e.ports["alpha"])
	proxied := e.load(e.router, e.rpid, quick, workers, throughputN)
	direct := e.load(directURL, e.rpid, quick, workers, throughputN)
	generating := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":%d,"stream":true}`, "alpha", genTokens)
	genProxied := e.load(e.router, e.rpid, generating, genWorkers, genN)
	genDirect := e.load(directURL, e.rpid, generating, genWorkers, genN)

	// The router's own latency: the same swap (freeze the running model,
	// thaw the frozen one) through the router, and by a direct activate
	// (root's, naming the process to evict, as the router does) plus a
	// request to the model server itself, interleaved so that drift on a
	// shared machine hits both alike. alpha is running.
	var viaRouter, viaDaemon []time.Duration
	for range swaps {
		viaRouter = append(viaRouter, e.ttfb(e.router, "beta"))
		start := e.activate("alpha", "beta")
		e.ttfb(fmt.Sprintf("http://127.0.0.1:%d", e.ports["alpha"]), "alpha")
		viaDaemon = append(viaDaemon, time.Since(start))
	}

	// llama-swap's swap: kill the running model (alpha), start the other
	// cold, wait for its health, request.
	port := testutil.FreePort(b)
	start := time.Now()
	if _, err := e.c.Kill(ctx, api.KillParams{Name: "alpha"}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.c.Wait(ctx, api.WaitParams{Name: "alpha"}, nil); err != nil {
		b.Fatal(err)
	}
	if _, err := e.c.Run(ctx, api.RunParams{Name: "k-beta", Dir: "/", User: e.user.Name, Cmd: e.simjob("k-beta", port, loadSeconds)}); err != nil {
		b.Fatal(err)
	}
	e.healthy(port)
	e.ttfb(fmt.Sprintf("http://127.0.0.1:%d", port), "k-beta")
	killRestart := time.Since(start)

	fz, rs, ds := median(frozen), median(viaRouter), median(viaDaemon)
	b.ReportMetric(ms(fz), "frozen-ttfb-ms")
	b.ReportMetric(ms(cold), "cold-ttfb-ms")
	b.ReportMetric(ms(killRestart), "killrestart-ttfb-ms")
	b.ReportMetric(float64(killRestart)/float64(fz), "killrestart/frozen")
	b.ReportMetric(ms(rs-ds), "router-overhead-ms")
	b.ReportMetric(genProxied.rps/genDirect.rps, "proxied/direct-rps")
	b.ReportMetric(proxied.rps/direct.rps, "proxied/direct-rps-noop")
	b.ReportMetric(us(proxied.router), "noop-router-cpu-us/req")
	b.ReportMetric(us(proxied.server), "noop-server-cpu-us/req")
	b.ReportMetric(us(proxied.clients), "noop-clients-cpu-us/req")
	b.ReportMetric(cpuBound(direct, proxied), "noop-cpu-bound")
	b.Logf("TTFB, streamed chat request, simulated 24 GiB GPU, two 13 GiB models, cold start = %s s load:", loadSeconds)
	b.Logf("  cold (nothing to evict)       %8.1f ms", ms(cold))
	b.Logf("  cold (freezes the other)      %8.1f ms", ms(coldSwap))
	b.Logf("  frozen (median of %d swaps)   %8.1f ms  (%.1f to %.1f)", swaps, ms(fz), ms(slices.Min(frozen)), ms(slices.Max(frozen)))
	if hibNote != "" {
		b.Logf("  hibernated                    n/a: %s", hibNote)
	} else {
		b.Logf("  hibernated                    %8.1f ms  (%.1fx frozen)", ms(hibernated), float64(hibernated)/float64(fz))
	}
	b.Logf("  kill-and-restart (llama-swap) %8.1f ms  (%.1fx frozen, %.2fx cold; cold is %.1fx frozen)",
		ms(killRestart), float64(killRestart)/float64(fz), float64(killRestart)/float64(cold), float64(cold)/float64(fz))
	b.Logf("router overhead, medians of %d interleaved swaps each: through the router %.1f ms (%.1f to %.1f) - direct activate+request %.1f ms (%.1f to %.1f) = %.1f ms",
		swaps, ms(rs), ms(slices.Min(viaRouter)), ms(slices.Max(viaRouter)), ms(ds), ms(slices.Min(viaDaemon)), ms(slices.Max(viaDaemon)), ms(rs-ds))
	b.Logf("requests/s, a generating server, %d workers x %d streamed replies of %d tokens %s s apart, keep-alive: proxied %.1f, direct %.1f, ratio %.2f",
		genWorkers, genN, genTokens, tokenDelay, genProxied.rps, genDirect.rps, genProxied.rps/genDirect.rps)
	b.Logf("requests/s, a no-op server (worst case), %d workers x %d non-streamed requests, keep-alive: proxied %.0f, direct %.0f, ratio %.2f",
		workers, throughputN, proxied.rps, direct.rps, proxied.rps/direct.rps)
	b.Logf("  CPU per request, proxied: %s", proxied)
	b.Logf("  CPU per request, direct:  %s", direct)
	b.Logf("  CPU bound on the ratio, (clients+server direct)/(clients+server+router proxied): %.2f", cpuBound(direct, proxied))
	b.Logf("  CPU per request, generating, proxied: %s; direct: %s", genProxied, genDirect)
}

// activate activates name, evicting other, and returns when the attempt
// that succeeded began. The router lets its hold on other go only after
// the reply has reached the client, and the daemon reports no event when
// a hold ends: until it has, the activate is refused, having changed
// nothing, and is tried again.
func (e *env) activate(name, other string) time.Time {
	e.b.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		_, err := e.c.Activate(ctx, api.ActivateParams{Name: name, Evict: []string{other}})
		cancel()
		if err == nil {
			return start
		}
		if api.CodeOf(err) != api.CodeResourceExhausted || time.Now().After(deadline) {
			e.b.Fatalf("activate %s: %v", name, err)
		}
	}
}

// quick is a request the model server answers at once, in one piece.
const quick = `{"model":"alpha","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`

// load is one requests/s run: its rate, and the CPU time each process
// spent per request during it.
type load struct {
	rps                             float64
	router, server, clients, daemon time.Duration
}

func (l load) String() string {
	return fmt.Sprintf("router %.0f us, model server %.0f us, clients %.0f us, daemon %.0f us",
		us(l.router), us(l.server), us(l.clients), us(l.daemon))
}

// cpuBound is what the CPU allows proxied requests/s to be of direct
// ones when the CPUs are the bottleneck: direct requests cost the clients
// and the server, proxied ones the router too.
func cpuBound(direct, proxied load) float64 {
	return float64(direct.clients+direct.server) / float64(proxied.clients+proxied.server+proxied.router)
}

// load runs throughput and measures the CPU time (utime+stime from
// /proc/PID/stat) of the router rpid, the model server alpha (its
// namespace's init and the server), this process (the clients) and the
// daemon over it.
func (e *env) load(base string, rpid int, body string, workers, n int) load {
	p, err := e.c.Process(context.Background(), "alpha")
	if err != nil {
		e.b.Fatal(err)
	}
	cpu := func() [4]float64 {
		return [4]float64{
			testutil.CPUSeconds(e.b, rpid),
			testutil.CPUSeconds(e.b, p.InitPID) + testutil.CPUSeconds(e.b, p.PID),
			testutil.CPUSeconds(e.b, os.Getpid()),
			testutil.CPUSeconds(e.b, e.daemon.Cmd.Process.Pid),
		}
	}
	before := cpu()
	rps := e.throughput(base, body, workers, n)
	after := cpu()
	per := func(i int) time.Duration {
		return time.Duration((after[i] - before[i]) / float64(workers*n) * float64(time.Second))
	}
	return load{rps: rps, router: per(0), server: per(1), clients: per(2), daemon: per(3)}
}

// throughput sends workers x n requests of body for chat completions to
// base over kept-alive connections, reading each reply whole, and returns
// requests per second.
func (e *env) throughput(base, body string, workers, n int) float64 {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				resp, err := client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					errs <- fmt.Errorf("status %d, %v", resp.StatusCode, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		e.b.Fatalf("requests to %s: %v", base, err)
	}
	return float64(workers*n) / elapsed.Seconds()
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return rank.Percentile(s, 50)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
