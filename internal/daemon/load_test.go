package daemon

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

var (
	loadOps  = flag.Int("load.ops", 40, "TestLoad64Clients: requests each client makes before it cleans up")
	loadSeed = flag.Int64("load.seed", 0, "TestLoad64Clients: random seed (0: from the clock); logged, so a failure can be replayed")
)

const (
	loadClients = 64
	// loadReadTimeout bounds one read: a daemon that stops answering fails
	// the test with a message instead of hanging it. It is a safety net,
	// never a synchronisation.
	loadReadTimeout = 60 * time.Second
	// loadMaxReports caps the protocol errors reported one by one.
	loadMaxReports = 30
)

// TestLoad64Clients is the load test: 64 clients, each on its own
// connection, issue a seeded random mix of requests (mostly queries, plus
// mutations of their own processes, jobs, leases and fillers, streams, and
// deliberately bad requests) against one daemon on simulated GPUs with the
// simulated checkpoint driver. Each client acts only on its own names, so
// every answer is predictable: a success of the right shape or one
// documented code. It asserts zero protocol errors (every line parses,
// echoes its id byte for byte, is an event or a well-formed final line,
// and carries the expected code), that every stream ends with its final
// line, that each client's view of its own work matches what it did, and
// that once every client has cleaned up no process, unfinished job, lease
// or filler is left, the simulated GPUs hold nothing, and an events
// subscriber watching throughout saw every process removed, every job
// finished and every lease released. Latency is reported, not asserted.
//
// Long form: go test -race -run TestLoad64Clients -load.ops 400 ./internal/daemon/
func TestLoad64Clients(t *testing.T) {
	seed := *loadSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	t.Logf("load: seed %d (replay with -load.seed %d)", seed, seed)
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Sim = "2x24G"
		c.JobKillGrace = 2 * time.Second
	})

	st := &loadStats{t: t}
	mon := startLoadMonitor(t, h, st)

	start := time.Now()
	var wg sync.WaitGroup
	for i := range loadClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newLoadClient(h, st, i, seed)
			c.work(*loadOps)
			c.cleanup()
			st.merge(c)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	// Every client has cleaned up: nothing may be left.
	fc := dialLoad(t, h, -1)
	defer fc.close()
	final := func(method string, params, result any) {
		t.Helper()
		r, err := fc.call(method, params)
		if err != nil || !r.ok {
			t.Fatalf("final %s: %v %s %s", method, err, r.code, r.msg)
		}
		if err := json.Unmarshal(r.result, result); err != nil {
			t.Fatalf("final %s result: %v", method, err)
		}
	}
	var ps api.PSResult
	final(api.MethodPS, nil, &ps)
	var jobs api.JobsResult
	final(api.MethodJobs, nil, &jobs)
	var leases api.LeasesResult
	final(api.MethodLeases, nil, &leases)
	var fillers api.FillersResult
	final(api.MethodFillers, nil, &fillers)
	if len(ps.Processes)+len(jobs.Jobs)+len(leases.Leases)+len(fillers.Fillers) != 0 {
		t.Errorf("left after cleanup: %d processes %v, %d unfinished jobs, %d leases, %d fillers",
			len(ps.Processes), procNames(ps.Processes), len(jobs.Jobs), len(leases.Leases), len(fillers.Fillers))
	}
	// The daemon's own sample, taken now that every tree has exited.
	h.refresh()
	var gpus api.GPUsResult
	final(api.MethodGPUs, nil, &gpus)
	for _, g := range gpus.GPUs {
		if g.UsedMiB != 0 || len(g.Processes) != 0 || g.FrozenMiB != 0 || len(g.Leases) != 0 {
			t.Errorf("GPU %d after cleanup: used %d MiB by %+v, frozen %d MiB, leases %v", g.Index, g.UsedMiB, g.Processes, g.FrozenMiB, g.Leases)
		}
		if u := h.used(g.Index); u != 0 {
			t.Errorf("simulated GPU %d still holds %d MiB", g.Index, u)
		}
	}
	var status api.Status
	final(api.MethodStatus, nil, &status)
	if status.Processes != 0 || status.HostMiB != 0 || status.Leases != 0 {
		t.Errorf("status after cleanup: %d processes, %d MiB in host RAM, %d leases", status.Processes, status.HostMiB, status.Leases)
	}

	// Every event published before the marker lease's release has reached
	// the subscriber once that release has.
	var marker api.Lease
	final(api.MethodAcquire, map[string]any{"gpus": 1, "min_free": 1}, &marker)
	final(api.MethodRelease, map[string]any{"id": marker.ID}, &marker)
	mon.finish(marker.ID)

	sort.Slice(st.statusLat, func(i, j int) bool { return st.statusLat[i] < st.statusLat[j] })
	pct := func(p int) float64 { return float64(rank.Percentile(st.statusLat, p).Microseconds()) / 1000 }
	t.Logf("load: %d clients, %d ops (%d status), %d protocol errors; status p50 %.2f ms p99 %.2f ms max %.2f ms; %.0f ops/s in %.1f s",
		loadClients, st.ops, len(st.statusLat), st.protoErrs, pct(50), pct(99), pct(100), float64(st.ops)/elapsed.Seconds(), elapsed.Seconds())
	t.Logf("load: %d processes run, %d jobs, %d leases, %d fills, %d streams ended with their final line, %d closed early by the client, %d documented refusals, %d events seen",
		st.runs, st.jobs, st.leases, st.fills, st.streams, st.cut, st.refused, mon.count)
	if st.protoErrs > 0 {
		t.Errorf("%d protocol errors (seed %d)", st.protoErrs, seed)
	}
}

// loadStats gathers the clients' counters.
type loadStats struct {
	t         *testing.T
	mu        sync.Mutex
	reported  int
	ops       int
	protoErrs int
	refused   int
	streams   int
	cut       int
	runs      int
	jobs      int
	leases    int
	fills     int
	statusLat []time.Duration
}

// report fails the test with one protocol error, up to loadMaxReports.
func (s *loadStats) report(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reported++
	if s.reported <= loadMaxReports {
		s.t.Errorf("%s", msg)
	}
}

func (s *loadStats) merge(c *loadClient) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops += c.ops
	s.protoErrs += c.protoErrs
	s.refused += c.refused
	s.streams += c.streams
	s.cut += c.cut
	s.runs += c.runs
	s.jobs += c.jobs
	s.leases += c.leases
	s.fills += c.fills
	s.statusLat = append(s.statusLat, c.statusLat...)
}

// loadConn speaks raw JSON lines, so that the test sees every line as the
// daemon wrote it.
type loadConn struct {
	c   net.Conn
	r   *bufio.Reader
	who int // the client's number, woven into the ids
	n   int // requests sent
}

func dialLoad(t testing.TB, h *ckptHarness, who int) *loadConn {
	lc, err := dialLoadConn(h, who)
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

func dialLoadConn(h *ckptHarness, who int) (*loadConn, error) {
	c, err := net.Dial("unix", h.cfg.Socket)
	if err != nil {
		return nil, err
	}
	return &loadConn{c: c, r: bufio.NewReaderSize(c, 64<<10), who: who}, nil
}

func (lc *loadConn) close() { lc.c.Close() }

// nextID varies the id's JSON type: the daemon must echo each byte for byte.
func (lc *loadConn) nextID() json.RawMessage {
	lc.n++
	switch lc.n % 4 {
	case 0:
		return json.RawMessage(strconv.Itoa(lc.n))
	case 1:
		return json.RawMessage(fmt.Sprintf(`"c%02d-%d"`, lc.who, lc.n))
	case 2:
		return json.RawMessage(fmt.Sprintf(`%d.50`, lc.n))
	default:
		return json.RawMessage(fmt.Sprintf(`{"c":%d,"n":[%d]}`, lc.who, lc.n))
	}
}

// send writes one request and returns its id.
func (lc *loadConn) send(method string, params any) (json.RawMessage, error) {
	id := lc.nextID()
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return id, lc.sendLine(string(b))
}

func (lc *loadConn) sendLine(line string) error {
	_, err := lc.c.Write([]byte(line + "\n"))
	return err
}

// loadLine is one line read back: an event, or a final response.
type loadLine struct {
	id     json.RawMessage
	event  *api.Event
	ok     bool
	result json.RawMessage
	code   api.Code
	msg    string
}

// read reads one line and checks its envelope: it parses, and it is either
// {id, event} or a final {id, ok: true, result} / {id, ok: false, error,
// code} with a documented code.
func (lc *loadConn) read() (loadLine, error) {
	lc.c.SetReadDeadline(time.Now().Add(loadReadTimeout))
	b, err := lc.r.ReadBytes('\n')
	if err != nil {
		return loadLine{}, fmt.Errorf("read: %w", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return loadLine{}, fmt.Errorf("line %.200q does not parse: %v", b, err)
	}
	l := loadLine{id: m["id"]}
	keys := func(allowed ...string) error {
		for k := range m {
			if !slices.Contains(allowed, k) {
				return fmt.Errorf("line %.200q has an unexpected key %q", b, k)
			}
		}
		return nil
	}
	if ev, ok := m["event"]; ok {
		if err := keys("id", "event"); err != nil {
			return l, err
		}
		l.event = new(api.Event)
		if err := json.Unmarshal(ev, l.event); err != nil {
			return l, fmt.Errorf("event %.200q: %v", ev, err)
		}
		return l, nil
	}
	if err := json.Unmarshal(m["ok"], &l.ok); err != nil {
		return l, fmt.Errorf("line %.200q is neither an event nor a response: %v", b, err)
	}
	if l.ok {
		l.result = m["result"]
		return l, keys("id", "ok", "result")
	}
	if err := keys("id", "ok", "error", "code"); err != nil {
		return l, err
	}
	if json.Unmarshal(m["error"], &l.msg) != nil || l.msg == "" {
		return l, fmt.Errorf("error line %.200q has no error sentence", b)
	}
	if json.Unmarshal(m["code"], &l.code) != nil || !slices.Contains(api.Codes, l.code) {
		return l, fmt.Errorf("error line %.200q has no documented code", b)
	}
	return l, nil
}

// readFor reads one line answering id.
func (lc *loadConn) readFor(id json.RawMessage) (loadLine, error) {
	l, err := lc.read()
	if err == nil && string(l.id) != string(id) {
		err = fmt.Errorf("line answering id %s carries id %s", id, l.id)
	}
	return l, err
}

// loadReply is a call's events and final line.
type loadReply struct {
	events []api.Event
	ok     bool
	result json.RawMessage
	code   api.Code // "" when ok
	msg    string
	dur    time.Duration // from sending to the final line
}

// call sends one request and reads its answer to the final line.
func (lc *loadConn) call(method string, params any) (loadReply, error) {
	t0 := time.Now()
	id, err := lc.send(method, params)
	if err != nil {
		return loadReply{}, err
	}
	var r loadReply
	for {
		l, err := lc.readFor(id)
		if err != nil {
			return r, err
		}
		if l.event != nil {
			r.events = append(r.events, *l.event)
			continue
		}
		r.dur = time.Since(t0)
		r.ok, r.result, r.code, r.msg = l.ok, l.result, l.code, l.msg
		return r, nil
	}
}

// loadProc is one of a client's processes as the client knows it.
type loadProc struct {
	name  string
	short bool      // exits by itself after a short hold
	state api.State // running, frozen or exited
	alloc bool      // its log said it allocated
}

// loadJob is a client's queued job.
type loadJob struct {
	name  string
	short bool // finishes by itself
	ended bool // finished; its process (if any) is still to be removed
	proc  bool // an attempt ran, so a process record exists
	waits bool // its process has been waited for
}

// loadClient is one client: its connection, its names and its counters.
type loadClient struct {
	h     *ckptHarness
	st    *loadStats
	n     int
	rng   *rand.Rand
	conn  *loadConn
	gpu   int
	op    int // current op, for messages
	gen   int
	procs [3]*loadProc // two long-lived, one short
	job   *loadJob
	lease string
	fill  bool // holds the filler of GPU n (clients 0 and 1 only)
	dead  bool // the connection broke; stop

	hist []string // the last requests and their codes, for failure messages

	ops, protoErrs, refused, streams, cut int
	runs, jobs, leases, fills             int
	statusLat                             []time.Duration
}

func newLoadClient(h *ckptHarness, st *loadStats, n int, seed int64) *loadClient {
	c := &loadClient{h: h, st: st, n: n, rng: rand.New(rand.NewSource(seed + int64(n))), gpu: n % 2}
	conn, err := dialLoadConn(h, n)
	if err != nil {
		c.fail("dial: %v", err)
		c.dead = true
		return c
	}
	c.conn = conn
	return c
}

// fail records a protocol error.
func (c *loadClient) fail(format string, args ...any) {
	c.protoErrs++
	c.st.report(fmt.Sprintf("client %d op %d: %s\n\tafter: %s", c.n, c.op, fmt.Sprintf(format, args...), strings.Join(c.hist, "; ")))
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func codeName(c api.Code) string {
	if c == "" {
		return "ok"
	}
	return string(c)
}

// do sends one request on the client's connection and checks that its
// answer carries one of the wanted codes ("" is success).
func (c *loadClient) do(method string, params any, want ...api.Code) (loadReply, bool) {
	if c.dead {
		return loadReply{}, false
	}
	c.ops++
	r, err := c.conn.call(method, params)
	if err != nil {
		c.fail("%s %s: %v", method, js(params), err)
		c.dead = true
		return r, false
	}
	if method == api.MethodStatus && params == nil {
		c.statusLat = append(c.statusLat, r.dur)
	} else {
		if len(c.hist) == 8 {
			c.hist = c.hist[1:]
		}
		c.hist = append(c.hist, fmt.Sprintf("%s %s: %s in %v", method, js(params), codeName(r.code), r.dur.Round(time.Millisecond)))
	}
	if !slices.Contains(want, r.code) {
		wants := make([]string, len(want))
		for i, w := range want {
			wants[i] = codeName(w)
		}
		c.fail("%s %s: got %s (%s), want %s", method, js(params), codeName(r.code), r.msg, strings.Join(wants, " or "))
		return r, false
	}
	return r, true
}

// ok is do for a call that must succeed, decoding its result into out.
func (c *loadClient) ok(method string, params, out any) (loadReply, bool) {
	r, ok := c.do(method, params, "")
	if !ok {
		return r, false
	}
	if out != nil {
		if err := json.Unmarshal(r.result, out); err != nil {
			c.fail("%s result %.200s: %v", method, r.result, err)
			return r, false
		}
	}
	return r, true
}

// stream is ok for a streaming call, counted as a stream that ended with
// its final line.
func (c *loadClient) stream(method string, params, out any, want ...api.Code) (loadReply, bool) {
	if len(want) == 0 {
		r, ok := c.ok(method, params, out)
		c.streams++
		return r, ok
	}
	r, ok := c.do(method, params, want...)
	c.streams++
	return r, ok
}

// noNulls fails when a list result holds a JSON null: lists are [], never
// null.
func (c *loadClient) noNulls(method string, raw json.RawMessage) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		c.fail("%s result: %v", method, err)
		return
	}
	if p := findNull(v, method); p != "" {
		c.fail("%s result has null at %s", method, p)
	}
}

func findNull(v any, path string) string {
	switch v := v.(type) {
	case nil:
		return path
	case map[string]any:
		for k, x := range v {
			if p := findNull(x, path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		for i, x := range v {
			if p := findNull(x, fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	}
	return ""
}

// work makes ops requests of a seeded random mix.
func (c *loadClient) work(ops int) {
	for c.ops < ops && !c.dead {
		c.op = c.ops
		if c.n < 2 && c.rng.Intn(8) == 0 {
			c.fillStep() // clients 0 and 1 own their GPU's filler
			continue
		}
		switch r := c.rng.Intn(100); {
		case r < 45:
			c.status()
		case r < 50:
			c.ps()
		case r < 55:
			c.gpus()
		case r < 58:
			c.jobsList()
		case r < 61:
			c.leasesList()
		case r < 63:
			c.fillersList()
		case r < 64:
			c.hello()
		case r < 72:
			c.bad()
		case r < 88:
			c.procStep()
		case r < 94:
			c.jobStep()
		case r < 97:
			c.leaseStep()
		default:
			c.status()
		}
	}
}

// cleanup ends everything the client still holds.
func (c *loadClient) cleanup() {
	if c.dead {
		// Start over on a fresh connection; a lease of the broken one went
		// with it.
		conn, err := dialLoadConn(c.h, c.n)
		if err != nil {
			c.fail("redial: %v", err)
			return
		}
		c.conn.close()
		c.conn, c.dead, c.lease = conn, false, ""
	}
	defer c.conn.close()
	for i, p := range c.procs {
		if p == nil {
			continue
		}
		switch {
		case p.short && p.state != api.StateExited:
			c.waitShort(i)
		case p.state != api.StateExited:
			c.kill(i)
		}
		c.rm(i)
	}
	for c.job != nil && !c.dead {
		switch {
		case !c.job.ended && c.job.short:
			c.jobWait()
		case !c.job.ended:
			c.cancel()
		default:
			c.jobCleanup()
		}
	}
	if c.lease != "" {
		c.release()
	}
	if c.fill {
		c.unfill()
	}
}

// --- queries ---

func (c *loadClient) status() {
	var s api.Status
	r, ok := c.ok(api.MethodStatus, nil, &s)
	if !ok {
		return
	}
	c.noNulls("status", r.result)
	if s.Protocol != api.ProtocolVersion || s.Backend != "sim" || s.Driver != "sim" || len(s.GPUs) != 2 {
		c.fail("status %.300s", r.result)
	}
	for i, g := range s.GPUs {
		if g.Index != i || g.UsedMiB+g.FreeMiB != g.TotalMiB {
			c.fail("status GPU %d: %+v", i, g)
		}
	}
}

func (c *loadClient) hello() {
	var hl api.Hello
	if _, ok := c.ok(api.MethodHello, nil, &hl); ok && (hl.Protocol != api.ProtocolVersion || hl.Caller.UID != 0) {
		c.fail("hello %+v", hl)
	}
}

// ps checks that the client's own processes are listed in the states it
// put them in, and nothing else of its own.
func (c *loadClient) ps() {
	var res api.PSResult
	r, ok := c.ok(api.MethodPS, nil, &res)
	if !ok {
		return
	}
	c.noNulls("ps", r.result)
	if !sort.SliceIsSorted(res.Processes, func(i, j int) bool { return res.Processes[i].Name < res.Processes[j].Name }) {
		c.fail("ps not sorted by name: %v", procNames(res.Processes))
	}
	listed := map[string]api.Process{}
	for _, p := range res.Processes {
		listed[p.Name] = p
	}
	mine := map[string]bool{}
	for _, p := range c.procs {
		if p == nil {
			continue
		}
		mine[p.name] = true
		got, ok := listed[p.name]
		switch {
		case !ok:
			c.fail("ps does not list %s (%s)", p.name, p.state)
		case p.short && p.state == api.StateRunning:
			if got.State != api.StateRunning && got.State != api.StateExited {
				c.fail("ps: short process %s is %s", p.name, got.State)
			}
		case got.State != p.state:
			c.fail("ps: %s is %s, want %s", p.name, got.State, p.state)
		}
	}
	if c.job != nil {
		mine[c.job.name] = true
	}
	prefix := fmt.Sprintf("c%02d-", c.n)
	for name := range listed {
		if strings.HasPrefix(name, prefix) && !mine[name] {
			c.fail("ps lists %s, which the client does not have", name)
		}
	}
}

func procNames(ps []api.Process) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func (c *loadClient) gpus() {
	var res api.GPUsResult
	r, ok := c.ok(api.MethodGPUs, nil, &res)
	if !ok {
		return
	}
	c.noNulls("gpus", r.result)
	if len(res.GPUs) != 2 {
		c.fail("gpus: %d GPUs", len(res.GPUs))
	}
	for i, g := range res.GPUs {
		if g.Index != i || g.UsedMiB+g.FreeMiB != g.TotalMiB || !g.Healthy {
			c.fail("gpus: GPU %d: index %d used %d free %d total %d healthy %v", i, g.Index, g.UsedMiB, g.FreeMiB, g.TotalMiB, g.Healthy)
		}
		if !sort.SliceIsSorted(g.Processes, func(a, b int) bool { return g.Processes[a].PID < g.Processes[b].PID }) {
			c.fail("gpus: GPU %d processes not sorted by pid", i)
		}
	}
}

// jobsList checks that the client's unfinished long job is listed and a
// finished one is not.
func (c *loadClient) jobsList() {
	var res api.JobsResult
	r, ok := c.ok(api.MethodJobs, nil, &res)
	if !ok {
		return
	}
	c.noNulls("jobs", r.result)
	prefix := fmt.Sprintf("c%02d-", c.n)
	found := false
	for _, j := range res.Jobs {
		if j.State.Terminal() {
			c.fail("jobs lists finished job %s (%s)", j.Name, j.State)
		}
		if !strings.HasPrefix(j.Name, prefix) {
			continue
		}
		if c.job == nil || j.Name != c.job.name || c.job.ended {
			c.fail("jobs lists %s (%s), which the client has no unfinished job of", j.Name, j.State)
		}
		found = true
	}
	if c.job != nil && !c.job.ended && !c.job.short && !found {
		c.fail("jobs does not list unfinished job %s", c.job.name)
	}
}

func (c *loadClient) leasesList() {
	var res api.LeasesResult
	r, ok := c.ok(api.MethodLeases, nil, &res)
	if !ok {
		return
	}
	c.noNulls("leases", r.result)
	found := slices.ContainsFunc(res.Leases, func(l api.Lease) bool { return l.ID == c.lease })
	if c.lease != "" && !found {
		c.fail("leases does not list %s", c.lease)
	}
}

func (c *loadClient) fillersList() {
	var res api.FillersResult
	r, ok := c.ok(api.MethodFillers, nil, &res)
	if !ok {
		return
	}
	c.noNulls("fillers", r.result)
	if c.n >= 2 {
		return
	}
	found := slices.ContainsFunc(res.Fillers, func(f api.Filler) bool { return f.Index == c.n })
	if found != c.fill {
		c.fail("fillers: GPU %d filler listed %v, want %v: %+v", c.n, found, c.fill, res.Fillers)
	}
}

// --- bad requests, each with its documented code ---

func (c *loadClient) bad() {
	ghost := fmt.Sprintf("c%02d-ghost", c.n)
	switch c.rng.Intn(14) {
	case 0:
		c.do("frobnicate", nil, api.CodeUnknownMethod)
	case 1:
		c.do(api.MethodStatus, map[string]any{"colour": 1}, api.CodeInvalidArgument)
	case 2:
		c.do(api.MethodPS, "a string", api.CodeInvalidArgument)
	case 3:
		c.do("", map[string]any{}, api.CodeBadRequest)
	case 4:
		c.malformed()
	case 5:
		c.do(api.MethodStatus, map[string]any{"name": ghost}, api.CodeNotFound)
	case 6:
		method := []string{api.MethodKill, api.MethodFreeze, api.MethodThaw, api.MethodLogs, api.MethodWait, api.MethodRm}[c.rng.Intn(6)]
		c.do(method, map[string]any{"name": ghost}, api.CodeNotFound)
	case 7:
		method := []string{api.MethodJob, api.MethodCancel, api.MethodJobWait}[c.rng.Intn(3)]
		c.do(method, map[string]any{"name": ghost}, api.CodeNotFound)
	case 8:
		c.do(api.MethodRelease, map[string]any{"id": "l999999999"}, api.CodeNotFound)
	case 9:
		c.do(api.MethodStatus, map[string]any{"name": "../etc"}, api.CodeInvalidArgument)
	case 10:
		c.do(api.MethodRun, map[string]any{"name": ghost, "cmd": []string{}, "dir": "/"}, api.CodeInvalidArgument)
	case 11:
		c.do(api.MethodRun, map[string]any{"name": ghost, "cmd": []string{"true"}, "dir": "/", "gpu": 7}, api.CodeInvalidArgument)
	case 12:
		c.do(api.MethodKill, map[string]any{"name": ghost, "grace": "soon"}, api.CodeInvalidArgument)
	default:
		c.do(api.MethodSubmit, map[string]any{"name": "j12", "cmd": []string{"true"}, "dir": "/"}, api.CodeInvalidArgument)
	}
}

// malformed sends a line that is not JSON: the answer is bad_request with
// no id, and the connection stays usable.
func (c *loadClient) malformed() {
	if c.dead {
		return
	}
	c.ops++
	if err := c.conn.sendLine(`{"method": "status"`); err != nil {
		c.fail("send: %v", err)
		c.dead = true
		return
	}
	l, err := c.conn.read()
	switch {
	case err != nil:
		c.fail("malformed line: %v", err)
		c.dead = true
	case l.event != nil || l.ok || l.code != api.CodeBadRequest || l.id != nil:
		c.fail("malformed line answered %+v, want bad_request without id", l)
	}
}

// --- processes ---

func (c *loadClient) procStep() {
	i := c.rng.Intn(len(c.procs))
	switch p := c.procs[i]; {
	case p == nil:
		c.start(i)
	case p.short:
		c.shortStep(i)
	default:
		c.longStep(i)
	}
}

func (c *loadClient) simjob(short bool) []string {
	args := []string{c.h.bins.SimJob, "--vram", "8"}
	if short {
		args = append(args, "--hold", "0.2")
	}
	return args
}

// start runs process slot i, sometimes watched by an events subscription
// on a second connection.
func (c *loadClient) start(i int) {
	p := &loadProc{name: fmt.Sprintf("c%02d-%c%d", c.n, "abs"[i], c.gen), short: i == 2}
	c.gen++
	var sub *loadConn
	var subID json.RawMessage
	if c.rng.Intn(4) == 0 {
		if sub, subID = c.subscribe(p.name); sub == nil {
			return
		}
		defer sub.close()
	}
	var got api.Process
	_, ok := c.ok(api.MethodRun, map[string]any{"name": p.name, "cmd": c.simjob(p.short), "dir": "/", "gpu": c.gpu,
		"env": map[string]string{"PATH": "/usr/bin:/bin"}}, &got)
	if !ok {
		return
	}
	c.runs++
	if got.Name != p.name || got.State != api.StateRunning || got.PID <= 0 || len(got.GPUs) != 1 || got.GPUs[0].Index != c.gpu {
		c.fail("run %s: %+v", p.name, got)
	}
	p.state = api.StateRunning
	c.procs[i] = p
	if sub != nil {
		c.watchStart(sub, subID, p.name)
	}
}

// subscribe opens an events subscription to name on a new connection and
// reads its first line.
func (c *loadClient) subscribe(name string) (*loadConn, json.RawMessage) {
	sub, err := dialLoadConn(c.h, c.n)
	if err != nil {
		c.fail("dial: %v", err)
		return nil, nil
	}
	c.ops++
	id, err := sub.send(api.MethodEvents, map[string]any{"name": name})
	if err == nil {
		var l loadLine
		if l, err = sub.readFor(id); err == nil && (l.event == nil || l.event.Type != api.EventSubscribed || l.event.Name != name) {
			err = fmt.Errorf("first line %+v, want subscribed", l)
		}
	}
	if err != nil {
		c.fail("events %s: %v", name, err)
		sub.close()
		return nil, nil
	}
	return sub, id
}

// watchStart reads the subscription until name's running event, after its
// starting event, then closes it (a stream the client ends itself).
func (c *loadClient) watchStart(sub *loadConn, id json.RawMessage, name string) {
	var seen []api.State
	for {
		l, err := sub.readFor(id)
		if err != nil {
			c.fail("events %s: %v (seen %v)", name, err, seen)
			return
		}
		if l.event == nil {
			c.fail("events %s ended: %+v", name, l)
			return
		}
		e := l.event
		if e.Type != api.EventProcess || e.Name != name || e.Process == nil || e.Process.Name != name {
			c.fail("events %s: foreign or malformed event %+v", name, e)
			return
		}
		seen = append(seen, e.State)
		if e.State == api.StateRunning {
			break
		}
	}
	if !slices.Equal(seen, []api.State{api.StateStarting, api.StateRunning}) {
		c.fail("events %s: states %v, want [starting running]", name, seen)
	}
	c.cut++
}

// awaitAlloc follows the log of slot i on a second connection until the
// job says it allocated, then hangs up (a stream the client ends itself).
func (c *loadClient) awaitAlloc(i int) {
	p := c.procs[i]
	fol, err := dialLoadConn(c.h, c.n)
	if err != nil {
		c.fail("dial: %v", err)
		return
	}
	defer fol.close()
	c.ops++
	id, err := fol.send(api.MethodLogs, map[string]any{"name": p.name, "lines": -1, "follow": true})
	if err != nil {
		c.fail("logs %s: %v", p.name, err)
		return
	}
	for {
		l, err := fol.readFor(id)
		if err != nil {
			c.fail("logs %s follow: %v", p.name, err)
			return
		}
		if l.event == nil {
			c.fail("logs %s follow ended before the job allocated: %+v", p.name, l)
			return
		}
		if l.event.Type != api.EventLog || l.event.Name != p.name {
			c.fail("logs %s follow: event %+v", p.name, l.event)
			return
		}
		if strings.HasPrefix(l.event.Line, "simjob: allocated 8 MiB") {
			p.alloc = true
			c.cut++
			return
		}
	}
}

// longStep takes slot i, a long-lived process, one step.
func (c *loadClient) longStep(i int) {
	p := c.procs[i]
	other := c.procs[1-i]
	var acts []func()
	switch p.state {
	case api.StateRunning:
		if !p.alloc {
			acts = append(acts, func() { c.awaitAlloc(i) }, func() { c.awaitAlloc(i) }, func() { c.kill(i) })
			break
		}
		acts = append(acts,
			func() { c.freeze(i) }, func() { c.freeze(i) }, func() { c.kill(i) },
			func() { c.statusName(p) }, func() { c.logs(p) }, func() { c.waitTimeout(p) }, func() { c.set(p) },
			func() { c.do(api.MethodThaw, map[string]any{"name": p.name}, api.CodeConflict) },
			func() { c.do(api.MethodRm, map[string]any{"name": p.name}, api.CodeConflict) },
			func() {
				c.do(api.MethodRun, map[string]any{"name": p.name, "cmd": []string{"true"}, "dir": "/"}, api.CodeExists)
			})
		if other != nil && !other.short && other.state == api.StateFrozen {
			acts = append(acts, func() { c.swap(i, 1-i) }, func() { c.swap(i, 1-i) })
		}
	case api.StateFrozen:
		acts = append(acts,
			func() { c.thaw(i, true) }, func() { c.thaw(i, false) }, func() { c.kill(i) },
			func() { c.statusName(p) }, func() { c.logs(p) }, func() { c.waitTimeout(p) },
			func() { c.do(api.MethodFreeze, map[string]any{"name": p.name}, api.CodeConflict) })
		if other != nil && !other.short && other.state == api.StateRunning && other.alloc {
			acts = append(acts, func() { c.swap(1-i, i) })
		}
	default: // exited
		acts = append(acts, func() { c.rm(i) }, func() { c.rm(i) }, func() { c.statusName(p) },
			func() { c.do(api.MethodKill, map[string]any{"name": p.name}, api.CodeConflict) })
	}
	acts[c.rng.Intn(len(acts))]()
}

// shortStep takes slot i, a process that exits by itself, one step.
func (c *loadClient) shortStep(i int) {
	p := c.procs[i]
	if p.state == api.StateExited {
		c.rm(i)
		return
	}
	switch c.rng.Intn(3) {
	case 0:
		c.waitShort(i)
	case 1:
		c.followShort(i)
	default:
		c.statusName(p)
	}
}

func (c *loadClient) statusName(p *loadProc) {
	var got api.Process
	if _, ok := c.ok(api.MethodStatus, map[string]any{"name": p.name}, &got); !ok {
		return
	}
	want := p.state == got.State || p.short && p.state == api.StateRunning && got.State == api.StateExited
	if got.Name != p.name || !want {
		c.fail("status %s: %s, want %s", p.name, got.State, p.state)
	}
	if got.State == api.StateFrozen && got.Tier != api.TierHost {
		c.fail("status %s: frozen in tier %q", p.name, got.Tier)
	}
}

func (c *loadClient) logs(p *loadProc) {
	var res api.LogsResult
	if _, ok := c.ok(api.MethodLogs, map[string]any{"name": p.name, "lines": -1}, &res); !ok {
		return
	}
	if res.Name != p.name || res.Lines == nil || p.alloc && (len(res.Lines) < 2 || !strings.HasPrefix(res.Lines[0], "simjob: pid=")) {
		c.fail("logs %s: %+v", p.name, res)
	}
}

// waitTimeout waits briefly on a process that does not exit by itself: the
// stream ends with a timeout line.
func (c *loadClient) waitTimeout(p *loadProc) {
	c.stream(api.MethodWait, map[string]any{"name": p.name, "timeout": "20ms"}, nil, api.CodeTimeout)
}

func (c *loadClient) set(p *loadProc) {
	prio := -c.rng.Intn(100)
	var got api.Process
	if _, ok := c.ok(api.MethodSet, map[string]any{"name": p.name, "priority": prio}, &got); ok && (got.Policy.Priority != prio || got.State != p.state) {
		c.fail("set %s priority %d: %+v", p.name, prio, got)
	}
}

func (c *loadClient) freeze(i int) {
	p := c.procs[i]
	var res api.CheckpointResult
	if _, ok := c.ok(api.MethodFreeze, map[string]any{"name": p.name}, &res); !ok {
		return
	}
	if res.Name != p.name || res.Op != "freeze" || res.State != api.StateFrozen || len(res.PIDs) != 1 || res.Bytes != 8<<20 {
		c.fail("freeze %s: %+v", p.name, res)
	}
	p.state = api.StateFrozen
}

// thaw thaws slot i: waiting for memory, or not, in which case a thaw
// that does not fit may be refused with resource_exhausted (documented).
func (c *loadClient) thaw(i int, wait bool) {
	p := c.procs[i]
	params := map[string]any{"name": p.name}
	want := []api.Code{"", api.CodeResourceExhausted}
	if wait {
		params["timeout"] = "30s"
		want = want[:1]
	}
	r, ok := c.do(api.MethodThaw, params, want...)
	if !ok {
		return
	}
	if r.code != "" {
		c.refused++
		return
	}
	var res api.CheckpointResult
	if err := json.Unmarshal(r.result, &res); err != nil || res.Name != p.name || res.State != api.StateRunning || len(res.PIDs) != 1 {
		c.fail("thaw %s: %.300s %v", p.name, r.result, err)
	}
	p.state = api.StateRunning
}

// swap freezes slot f and thaws slot t.
func (c *loadClient) swap(f, t int) {
	pf, pt := c.procs[f], c.procs[t]
	var res api.SwapResult
	if _, ok := c.ok(api.MethodSwap, map[string]any{"freeze": pf.name, "thaw": pt.name, "timeout": "30s"}, &res); !ok {
		return
	}
	if res.Freeze.Name != pf.name || res.Freeze.State != api.StateFrozen || res.Thaw.Name != pt.name || res.Thaw.State != api.StateRunning {
		c.fail("swap %s -> %s: %+v", pf.name, pt.name, res)
	}
	pf.state, pt.state = api.StateFrozen, api.StateRunning
}

func (c *loadClient) kill(i int) {
	p := c.procs[i]
	var got api.Process
	// A long grace: under 64 clients on two cores a job can take
	// seconds to act on its SIGTERM, and the test checks the signal.
	if _, ok := c.ok(api.MethodKill, map[string]any{"name": p.name, "grace": "60s"}, &got); !ok {
		return
	}
	if got.Name != p.name || got.State != api.StateExited || got.Exit == nil || got.Exit.Signal != "SIGTERM" || got.VRAMMiB != 0 {
		c.fail("kill %s (was %s): %+v exit %+v", p.name, p.state, got, got.Exit)
	}
	p.state = api.StateExited
}

func (c *loadClient) rm(i int) {
	p := c.procs[i]
	var got api.Process
	if _, ok := c.ok(api.MethodRm, map[string]any{"name": p.name}, &got); !ok {
		return
	}
	if got.Name != p.name || got.State != api.StateExited {
		c.fail("rm %s: %+v", p.name, got)
	}
	c.procs[i] = nil
}

// waitShort waits for the short process in slot i: the stream ends with
// its exit.
func (c *loadClient) waitShort(i int) {
	p := c.procs[i]
	var got api.Process
	r, ok := c.stream(api.MethodWait, map[string]any{"name": p.name}, &got)
	if !ok {
		return
	}
	if got.Name != p.name || got.State != api.StateExited || got.Exit == nil || got.Exit.Code == nil || *got.Exit.Code != 0 {
		c.fail("wait %s: %+v exit %+v", p.name, got, got.Exit)
	}
	for _, e := range r.events {
		if e.Type != api.EventProcess || e.Name != p.name {
			c.fail("wait %s: event %+v", p.name, e)
		}
	}
	p.state = api.StateExited
}

// followShort follows the short process's log to its end.
func (c *loadClient) followShort(i int) {
	p := c.procs[i]
	var res api.LogsResult
	r, ok := c.stream(api.MethodLogs, map[string]any{"name": p.name, "lines": -1, "follow": true}, &res)
	if !ok {
		return
	}
	var lines []string
	for _, e := range r.events {
		if e.Type != api.EventLog || e.Name != p.name {
			c.fail("logs %s follow: event %+v", p.name, e)
		}
		lines = append(lines, e.Line)
	}
	if res.Name != p.name || res.Lines == nil || len(res.Lines) != 0 || len(lines) == 0 || lines[len(lines)-1] != "simjob: done, exiting with 0" {
		c.fail("logs %s follow: lines %q, result %+v", p.name, lines, res)
	}
	p.state = api.StateExited
}

// --- jobs ---

func (c *loadClient) jobStep() {
	j := c.job
	switch {
	case j == nil:
		c.submit()
	case j.ended:
		c.jobCleanup()
	case c.rng.Intn(3) == 0:
		c.jobLookup()
	case j.short:
		c.jobWait()
	case c.rng.Intn(2) == 0:
		c.stream(api.MethodJobWait, map[string]any{"name": j.name, "timeout": "20ms"}, nil, api.CodeTimeout)
	default:
		c.cancel()
	}
}

func (c *loadClient) submit() {
	j := &loadJob{name: fmt.Sprintf("c%02d-j%d", c.n, c.gen), short: c.rng.Intn(2) == 0}
	c.gen++
	var res api.SubmitResult
	if _, ok := c.ok(api.MethodSubmit, map[string]any{"name": j.name, "cmd": c.simjob(j.short), "dir": "/", "vram": 32,
		"env": map[string]string{"PATH": "/usr/bin:/bin"}}, &res); !ok {
		return
	}
	c.jobs++
	if len(res.Jobs) != 1 || res.Jobs[0].Name != j.name || res.Jobs[0].VRAMMiB != 32 || res.Jobs[0].State.Terminal() {
		c.fail("submit %s: %+v", j.name, res.Jobs)
	}
	c.job = j
}

func (c *loadClient) jobLookup() {
	var got api.Job
	if _, ok := c.ok(api.MethodJob, map[string]any{"name": c.job.name}, &got); !ok {
		return
	}
	if got.Name != c.job.name || !c.job.short && got.State.Terminal() {
		c.fail("job %s: %s", c.job.name, got.State)
	}
}

// jobWait waits for the short job to finish: the stream ends with it done.
func (c *loadClient) jobWait() {
	j := c.job
	var got api.Job
	r, ok := c.stream(api.MethodJobWait, map[string]any{"name": j.name}, &got)
	if !ok {
		c.job = nil // no telling where it is: leave it to the final check
		return
	}
	if got.Name != j.name || got.State != api.JobDone || len(got.Attempts) != 1 {
		c.fail("job_wait %s: %s (%s), %d attempts", j.name, got.State, got.Reason, len(got.Attempts))
	}
	for _, e := range r.events {
		if e.Type != api.EventJob || e.Job == nil || e.Job.Name != j.name {
			c.fail("job_wait %s: event %+v", j.name, e)
		}
	}
	j.ended, j.proc = true, ranProcess(got)
}

// ranProcess reports whether a finished job's last attempt ran a process
// (whose record then stays until rm): an attempt cancelled before it
// started has none, and no exit.
func ranProcess(j api.Job) bool {
	return len(j.Attempts) > 0 && j.Attempts[len(j.Attempts)-1].Exit != nil
}

func (c *loadClient) cancel() {
	j := c.job
	var got api.Job
	if _, ok := c.ok(api.MethodCancel, map[string]any{"name": j.name}, &got); !ok {
		c.job = nil
		return
	}
	if got.Name != j.name || got.State != api.JobCancelled {
		c.fail("cancel %s: %s (%s)", j.name, got.State, got.Reason)
	}
	j.ended, j.proc = true, ranProcess(got)
}

// jobCleanup removes a finished job's process: waited for (it has exited,
// or exits at once), then removed; a job that never ran has none.
func (c *loadClient) jobCleanup() {
	j := c.job
	switch {
	case !j.proc:
		c.do(api.MethodRm, map[string]any{"name": j.name}, api.CodeNotFound)
		c.job = nil
	case !j.waits:
		var got api.Process
		if _, ok := c.stream(api.MethodWait, map[string]any{"name": j.name}, &got); ok && (got.State != api.StateExited || got.Exit == nil) {
			c.fail("wait for job process %s: %+v", j.name, got)
		}
		j.waits = true
	default:
		c.do(api.MethodRm, map[string]any{"name": j.name}, "")
		c.job = nil
	}
}

// --- leases and fillers ---

func (c *loadClient) leaseStep() {
	if c.lease != "" {
		if c.rng.Intn(3) == 0 {
			c.leasesList()
		} else {
			c.release()
		}
		return
	}
	var l api.Lease
	// acquire is a streaming call with no events: its final line is all.
	if _, ok := c.stream(api.MethodAcquire, map[string]any{"gpus": 1, "min_free": 64}, &l); !ok {
		return
	}
	c.leases++
	if l.ID == "" || len(l.GPUs) != 1 || l.MiB != 64 || l.CUDAVisibleDevices != l.GPUs[0].UUID {
		c.fail("acquire: %+v", l)
	}
	c.lease = l.ID
}

func (c *loadClient) release() {
	var l api.Lease
	if _, ok := c.ok(api.MethodRelease, map[string]any{"id": c.lease}, &l); ok && l.ID != c.lease {
		c.fail("release %s: %+v", c.lease, l)
	}
	c.lease = ""
}

// fillStep: clients 0 and 1 each own the filler of their own GPU.
func (c *loadClient) fillStep() {
	if c.fill {
		switch c.rng.Intn(3) {
		case 0:
			c.fillersList()
		case 1:
			c.fillTo(512 * (1 + c.rng.Intn(4)))
		default:
			c.unfill()
		}
		return
	}
	c.fillTo(1024)
}

func (c *loadClient) fillTo(mib int) {
	var f api.Filler
	if _, ok := c.ok(api.MethodFill, map[string]any{"gpu": c.n, "mib": mib}, &f); !ok {
		return
	}
	c.fills++
	if f.Index != c.n || f.TargetMiB != uint64(mib) || f.PID <= 0 || f.Process != "" {
		c.fail("fill GPU %d to %d MiB: %+v", c.n, mib, f)
	}
	c.fill = true
}

func (c *loadClient) unfill() {
	var f api.Filler
	if _, ok := c.ok(api.MethodUnfill, map[string]any{"gpu": c.n}, &f); ok && (f.Index != c.n || f.HeldMiB != 0) {
		c.fail("unfill GPU %d: %+v", c.n, f)
	}
	c.fill = false
}

// loadMonitor subscribes to every event for the whole test and checks the
// story it tells: lines well formed, seq increasing, and in the end every
// process removed, every job finished, every lease released.
type loadMonitor struct {
	t        *testing.T
	conn     *loadConn
	id       json.RawMessage
	releases chan string // ids of released leases, in event order
	done     chan struct{}
	closing  bool
	mu       sync.Mutex
	count    int
	lastSeq  uint64
	procs    map[string]api.EventType // last event type per process name
	jobs     map[string]api.JobState  // last state per job id
	leases   map[string]bool          // released, per lease id
	errs     []string
	dropped  string // the final line, when the subscription was dropped
}

func startLoadMonitor(t *testing.T, h *ckptHarness, st *loadStats) *loadMonitor {
	m := &loadMonitor{t: t, conn: dialLoad(t, h, 99), releases: make(chan string, 1<<16), done: make(chan struct{}),
		procs: map[string]api.EventType{}, jobs: map[string]api.JobState{}, leases: map[string]bool{}}
	id, err := m.conn.send(api.MethodEvents, nil)
	if err != nil {
		t.Fatal(err)
	}
	m.id = id
	if l, err := m.conn.readFor(id); err != nil || l.event == nil || l.event.Type != api.EventSubscribed {
		t.Fatalf("events: first line %+v: %v", l, err)
	}
	st.mu.Lock()
	st.ops++
	st.mu.Unlock()
	go m.run()
	return m
}

func (m *loadMonitor) run() {
	defer close(m.done)
	for {
		l, err := m.conn.readFor(m.id)
		m.mu.Lock()
		if err != nil {
			if !m.closing {
				m.errs = append(m.errs, err.Error())
			}
			m.mu.Unlock()
			return
		}
		if l.event == nil {
			m.dropped = fmt.Sprintf("%s: %s", l.code, l.msg)
			if l.code != api.CodeUnavailable {
				m.errs = append(m.errs, "events stream ended with "+m.dropped)
			}
			m.mu.Unlock()
			return
		}
		m.observe(l.event)
		m.mu.Unlock()
	}
}

func (m *loadMonitor) observe(e *api.Event) {
	m.count++
	switch e.Type {
	case api.EventProcess, api.EventRemoved:
		// seq numbers these (only), increasing, with gaps.
		if e.Seq <= m.lastSeq {
			m.errs = append(m.errs, fmt.Sprintf("%s event seq %d after %d", e.Type, e.Seq, m.lastSeq))
		}
		m.lastSeq = e.Seq
		if e.Name == "" || e.Process == nil || e.Process.Name != e.Name {
			m.errs = append(m.errs, fmt.Sprintf("malformed %s event %+v", e.Type, e))
			return
		}
		m.procs[e.Name] = e.Type
	case api.EventJob:
		if e.Job == nil {
			m.errs = append(m.errs, fmt.Sprintf("job event without its job: %+v", e))
			return
		}
		if e.Warning == "" {
			m.jobs[e.Job.ID] = e.JobState
		}
	case api.EventLease:
		if e.Lease == nil {
			m.errs = append(m.errs, fmt.Sprintf("lease event without its lease: %+v", e))
			return
		}
		released := !e.Lease.ReleasedAt.IsZero()
		m.leases[e.Lease.ID] = released
		if released {
			select {
			case m.releases <- e.Lease.ID:
			default:
				m.errs = append(m.errs, "too many lease releases for the monitor")
			}
		}
	}
}

// finish waits until the monitor has seen marker released, closes the
// subscription and checks the story.
func (m *loadMonitor) finish(marker string) {
	t := m.t
	t.Helper()
	deadline := time.After(loadReadTimeout)
wait:
	for {
		select {
		case id := <-m.releases:
			if id == marker {
				break wait
			}
		case <-m.done:
			break wait
		case <-deadline:
			t.Errorf("events: never saw lease %s released", marker)
			break wait
		}
	}
	m.mu.Lock()
	m.closing = true
	m.mu.Unlock()
	m.conn.close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.errs {
		t.Errorf("events: %s", e)
	}
	if m.dropped != "" {
		t.Logf("load: the events monitor was dropped (%s); its end-of-test checks are skipped", m.dropped)
		return
	}
	var bad []string
	for name, last := range m.procs {
		if last != api.EventRemoved {
			bad = append(bad, "process "+name+" not removed")
		}
	}
	for id, state := range m.jobs {
		if !state.Terminal() {
			bad = append(bad, fmt.Sprintf("job %s last %s", id, state))
		}
	}
	for id, released := range m.leases {
		if !released {
			bad = append(bad, "lease "+id+" not released")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Errorf("events: after cleanup: %s", strings.Join(bad, "; "))
	}
	if len(m.procs) == 0 || len(m.jobs) == 0 || len(m.leases) == 0 {
		t.Errorf("events: saw %d processes, %d jobs, %d leases; want some of each", len(m.procs), len(m.jobs), len(m.leases))
	}
}

// TestSignalAfterExitRecorded is a race the load test found: a kill whose
// grace ran out just as the tree exited sent its SIGKILL through a pidfd
// the exit watcher had already closed, and answered `internal` ("SIGKILL:
// use of closed file") for a process that had ended. Signalling a runtime
// whose exit is recorded must be a no-op, as for a process already gone.
func TestSignalAfterExitRecorded(t *testing.T) {
	h := newHarness(t)
	p := h.run("brief", "sleep", "1000")
	rt := h.d.procs.get(p.ID)
	if rt == nil {
		t.Fatal("no runtime for a running process")
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "brief", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	if got := h.waitExit("brief"); got.State != api.StateExited {
		t.Fatalf("after SIGKILL: %+v", got)
	}
	<-rt.exited
	if err := rt.signal(unix.SIGKILL); err != nil {
		t.Fatalf("SIGKILL to a tree whose exit is recorded: %v", err)
	}
}

// TestTendReleasedFiller is the other race the load test found: the filler
// loop tends the fillers it listed before an unfill released one; finding
// that filler without a helper, it took the helper for dead and started a
// new one (and saved its record again), which then held its target on a
// GPU that no longer had a filler. A released filler is left alone.
func TestTendReleasedFiller(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	gpu := &api.GPURef{Index: 0}
	if _, err := h.client().Fill(ctxT(t), api.FillParams{GPU: gpu, MiB: api.VRAM{MiB: 1024}}); err != nil {
		t.Fatal(err)
	}
	f := h.d.fillers.get(h.d.fillers.all()[0].rec.UUID)
	if _, err := h.client().Unfill(ctxT(t), *gpu); err != nil {
		t.Fatal(err)
	}
	h.d.tendFiller(ctxT(t), f) // as the loop would, from its earlier list
	if u := h.used(0); u != 0 {
		t.Errorf("GPU 0 holds %d MiB after unfill and a late tend", u)
	}
	if keys, err := h.d.fillers.store.Keys(); err != nil || len(keys) != 0 {
		t.Errorf("filler records after unfill: %v %v", keys, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.helper != nil {
		f.helper.Release(ctxT(t))
	}
}
