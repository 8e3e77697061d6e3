package daemon

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// families is one scrape, parsed.
type families map[string]*dto.MetricFamily

// scrape GETs http://addr/metrics and parses the text exposition format.
func scrape(t testing.TB, addr string) families {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams
}

// find returns the one metric of family name, which must have type typ,
// whose labels include want.
func (f families) find(t testing.TB, name string, typ dto.MetricType, want map[string]string) *dto.Metric {
	t.Helper()
	fam, ok := f[name]
	if !ok {
		t.Fatalf("no metric family %s", name)
	}
	if fam.GetType() != typ {
		t.Fatalf("%s is a %s, want a %s", name, fam.GetType(), typ)
	}
	var found []*dto.Metric
	for _, m := range fam.GetMetric() {
		if hasLabels(m, want) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series match, want 1 (family: %v)", name, want, len(found), fam.GetMetric())
	}
	return found[0]
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, lp := range m.GetLabel() {
		have[lp.GetName()] = lp.GetValue()
	}
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// gauge, counter and count are the value of one series; count is a
// histogram's number of observations.
func (f families) gauge(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return f.find(t, name, dto.MetricType_GAUGE, labels).GetGauge().GetValue()
}

func (f families) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	return f.find(t, name, dto.MetricType_COUNTER, labels).GetCounter().GetValue()
}

func (f families) count(t *testing.T, name string, labels map[string]string) uint64 {
	t.Helper()
	return f.find(t, name, dto.MetricType_HISTOGRAM, labels).GetHistogram().GetSampleCount()
}

// wantEq fails t unless got == want.
func wantEq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

type labels = map[string]string

// TestMetricsScrape runs a process, freezes and thaws it, runs a job,
// fills a GPU, holds a lease and makes failing requests, scraping
// /metrics over HTTP on the way: every family has its type, and the values
// are what the daemon did and what the simulated GPUs hold.
func TestMetricsScrape(t *testing.T) {
	addr := testutil.FreeLoopback(t)
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Sim = "3x4G"
		c.MetricsAddr = addr
	})
	ctx := ctxT(t)
	train := h.jobs("train", 0, 1000)

	if _, err := h.client().Freeze(ctx, api.FreezeParams{Name: "train"}); err != nil {
		t.Fatal(err)
	}
	frozen := scrape(t, addr)
	wantEq(t, "processes{frozen} while frozen", frozen.gauge(t, "gpusched_processes", labels{"state": "frozen"}), 1)
	wantEq(t, "processes{running} while frozen", frozen.gauge(t, "gpusched_processes", labels{"state": "running"}), 0)
	wantEq(t, "reserved frozen on GPU 0", frozen.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "0", "kind": "frozen"}), 1000<<20)
	wantEq(t, "train's VRAM while frozen", frozen.gauge(t, "gpusched_process_vram_bytes", labels{"name": "train"}), 0)
	wantEq(t, "freezes", frozen.count(t, "gpusched_checkpoint_duration_seconds", labels{"op": "freeze"}), 1)
	wantEq(t, "thaws before the thaw", frozen.count(t, "gpusched_checkpoint_duration_seconds", labels{"op": "thaw"}), 0)

	if _, err := h.client().Thaw(ctx, api.ThawParams{Name: "train"}); err != nil {
		t.Fatal(err)
	}
	job := h.submit(api.JobSpec{Name: "eval", Cmd: h.simjob("--vram", "500", "--tick", "0.02", "--util", "30"), VRAM: api.VRAM{MiB: 1024}})
	h.waitRunning("eval")
	_, err := h.client().Freeze(ctx, api.FreezeParams{Name: "nope"})
	wantCode(t, err, api.CodeNotFound)
	rc := h.raw()
	rc.send(`{"method":"no-such-method"}`)
	if m := rc.recv(); m["code"] != string(api.CodeUnknownMethod) {
		t.Fatalf("unknown method answered %v", m)
	}
	if _, err := h.client().Fill(ctx, api.FillParams{GPU: &api.GPURef{Index: 2}, MiB: api.VRAM{MiB: 1024}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Acquire(ctx, api.AcquireParams{GPUIDs: []api.GPURef{{Index: 1}}, MinFree: api.VRAM{MiB: 512}}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	held := h.filler(2).HeldMiB
	gpus, err := h.client().GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := scrape(t, addr)

	wantEq(t, "build_info", f.gauge(t, "gpusched_build_info", labels{"version": Version, "backend": h.d.gpus.Name()}), 1)
	if len(gpus) != 3 {
		t.Fatalf("gpus: %+v", gpus)
	}
	for _, g := range gpus {
		gl := labels{"gpu": strconv.Itoa(g.Index), "uuid": g.UUID}
		wantEq(t, fmt.Sprintf("GPU %d total", g.Index), f.gauge(t, "gpusched_gpu_memory_total_bytes", gl), 4<<30)
		wantEq(t, fmt.Sprintf("GPU %d used", g.Index), f.gauge(t, "gpusched_gpu_memory_used_bytes", gl), float64(h.used(g.Index)<<20))
	}
	if held == 0 {
		t.Fatal("the filler on GPU 2 holds nothing")
	}
	wantEq(t, "reserved filler on GPU 2", f.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "2", "kind": "filler"}), float64(held<<20))
	wantEq(t, "reserved lease on GPU 1", f.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "1", "kind": "lease"}), 512<<20)
	wantEq(t, "reserved frozen on GPU 0 after thaw", f.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "0", "kind": "frozen"}), 0)
	wantEq(t, "reserved filler on GPU 0", f.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "0", "kind": "filler"}), 0)

	wantEq(t, "train's VRAM", f.gauge(t, "gpusched_process_vram_bytes", labels{"name": "train", "user": train.User, "job": ""}), 1000<<20)
	wantEq(t, "eval's VRAM", f.gauge(t, "gpusched_process_vram_bytes", labels{"name": "eval", "user": job.User, "job": job.ID}), 500<<20)
	evalGPU := strconv.Itoa(h.proc("eval").GPUs[0].Index)
	wantEq(t, "eval's own utilization", f.gauge(t, "gpusched_process_gpu_utilization_ratio", labels{"name": "eval", "job": job.ID, "gpu": evalGPU}), 0.3)
	wantEq(t, "train's own utilization", f.gauge(t, "gpusched_process_gpu_utilization_ratio", labels{"name": "train", "gpu": "0"}), 0)
	wantEq(t, "job eval's VRAM", f.gauge(t, "gpusched_job_vram_bytes", labels{"job": job.ID, "name": "eval", "user": job.User}), 500<<20)
	wantEq(t, "processes{running}", f.gauge(t, "gpusched_processes", labels{"state": "running"}), 2)
	wantEq(t, "processes{frozen}", f.gauge(t, "gpusched_processes", labels{"state": "frozen"}), 0)
	wantEq(t, "jobs{running}", f.gauge(t, "gpusched_jobs", labels{"state": "running"}), 1)
	wantEq(t, "jobs{queued}", f.gauge(t, "gpusched_jobs", labels{"state": "queued"}), 0)
	wantEq(t, "queue depth", f.gauge(t, "gpusched_queue_depth", nil), 0)
	wantEq(t, "queue waits", f.count(t, "gpusched_queue_wait_seconds", nil), 1)
	wantEq(t, "leases{held}", f.gauge(t, "gpusched_leases", labels{"state": "held"}), 1)
	wantEq(t, "leases{pending}", f.gauge(t, "gpusched_leases", labels{"state": "pending"}), 0)

	for op, n := range map[string]uint64{"freeze": 1, "thaw": 1, "hibernate": 0, "restore": 0} {
		wantEq(t, op+" count", f.count(t, "gpusched_checkpoint_duration_seconds", labels{"op": op}), n)
		wantEq(t, op+" bytes", f.counter(t, "gpusched_checkpoint_bytes_total", labels{"op": op}), float64(n*1000<<20))
	}
	if sum := f.find(t, "gpusched_checkpoint_duration_seconds", dto.MetricType_HISTOGRAM, labels{"op": "freeze"}).GetHistogram().GetSampleSum(); sum <= 0 {
		t.Errorf("freeze duration sum %v, want > 0", sum)
	}

	for _, c := range []struct {
		method, code string
		n            float64
	}{
		{"freeze", "ok", 1}, {"freeze", "not_found", 1}, {"thaw", "ok", 1}, {"submit", "ok", 1},
		{"fill", "ok", 1}, {"acquire", "ok", 1}, {"unknown", "unknown_method", 1},
	} {
		wantEq(t, "api_requests_total{"+c.method+","+c.code+"}",
			f.counter(t, "gpusched_api_requests_total", labels{"method": c.method, "code": c.code}), c.n)
	}
	for _, m := range f["gpusched_api_requests_total"].GetMetric() {
		if hasLabels(m, labels{"method": "no-such-method"}) {
			t.Errorf("an unknown method made its own series: %v", m)
		}
	}
	if _, ok := f["go_goroutines"]; !ok {
		t.Error("no Go runtime metrics")
	}
	if _, ok := f["process_resident_memory_bytes"]; !ok {
		t.Error("no process metrics")
	}
}

// TestMetricsOffByDefault: without --metrics-addr the daemon opens no TCP
// listener at all.
func TestMetricsOffByDefault(t *testing.T) {
	before := tcpListeners(t)
	h := newHarness(t)
	if h.cfg.MetricsAddr != "" {
		t.Fatalf("default --metrics-addr %q", h.cfg.MetricsAddr)
	}
	if after := tcpListeners(t); !slices.Equal(before, after) {
		t.Fatalf("TCP listeners %v with metrics off, were %v", after, before)
	}
	if h.d.metrics != nil {
		t.Fatal("metrics registry built with metrics off")
	}
}

// TestMetricsLoopbackDefault: a port alone listens on 127.0.0.1 only, and
// the listener is gone once Run returns.
func TestMetricsLoopbackDefault(t *testing.T) {
	_, port, err := net.SplitHostPort(testutil.FreeLoopback(t))
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *config.Config) { c.MetricsAddr = port })
	var ours []string
	for _, a := range tcpListeners(t) {
		if _, p, _ := net.SplitHostPort(a); p == port {
			ours = append(ours, a)
		}
	}
	if !slices.Equal(ours, []string{"127.0.0.1:" + port}) {
		t.Fatalf("listening on %v for --metrics-addr %s, want only 127.0.0.1:%s", ours, port, port)
	}
	f := scrape(t, "127.0.0.1:"+port)
	wantEq(t, "GPU 0 total", f.gauge(t, "gpusched_gpu_memory_total_bytes", labels{"gpu": "0"}), float64(h.d.gpuView().devices[0].TotalMiB<<20))
	h.stop()
	if resp, err := http.Get("http://127.0.0.1:" + port + "/metrics"); err == nil {
		resp.Body.Close()
		t.Fatalf("metrics still served after Run returned: %s", resp.Status)
	}
}

// TestMetricsListenFailure: an address in use, or one the machine does not
// have, fails startup with an error that names it, before the socket
// serves.
func TestMetricsListenFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := map[string]string{"in use": busy.Addr().String()}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_nonlocal_bind"); err == nil && strings.TrimSpace(string(b)) == "0" {
		cases["not local"] = "192.0.2.1:9400" // TEST-NET-1: never a local address
	}
	for name, addr := range cases {
		t.Run(name, func(t *testing.T) {
			h := prepareHarness(t, func(c *config.Config) { c.MetricsAddr = addr })
			d, err := New(h.cfg, WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err = d.Run(ctx)
			if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "--metrics-addr") {
				t.Fatalf("Run with --metrics-addr %s: %v, want an error naming the flag and the address", addr, err)
			}
			select {
			case <-d.Ready():
				t.Fatal("the socket served although metrics could not")
			default:
			}
			if _, err := os.Stat(filepath.Join(h.cfg.StateDir, "lock")); err != nil {
				t.Fatalf("state dir not set up before the failure: %v", err)
			}
		})
	}
}

// tcpListeners lists the local addresses ("ip:port", sorted) of this
// process's listening TCP sockets, from /proc/net/tcp{,6} and its fds.
func tcpListeners(t *testing.T) []string {
	t.Helper()
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	var out []string
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || !inodes[fields[9]] { // 0A: LISTEN
				continue
			}
			out = append(out, procNetAddr(t, fields[1]))
		}
		f.Close()
	}
	slices.Sort(out)
	return out
}

// procNetAddr decodes a /proc/net/tcp address: hex IP in 32-bit
// little-endian words, ":" and a hex port.
func procNetAddr(t *testing.T, s string) string {
	t.Helper()
	ipHex, portHex, _ := strings.Cut(s, ":")
	raw, err := hex.DecodeString(ipHex)
	if err != nil || len(raw)%4 != 0 {
		t.Fatalf("address %q in /proc/net/tcp", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		t.Fatalf("port in %q: %v", s, err)
	}
	return net.JoinHostPort(net.IP(raw).String(), strconv.FormatUint(port, 10))
}

// TestMetricsHibernateRestore hibernates a running process to disk with
// real CRIU and thaws it back: hibernate (and the freeze it began with),
// then restore (and the thaw it ended with) are each observed once, with
// the image bytes written and read.
func TestMetricsHibernateRestore(t *testing.T) {
	addr := testutil.FreeLoopback(t)
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.MetricsAddr = addr })
	h.memJob("job", 512, 64)
	hr, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	f := scrape(t, addr)
	wantEq(t, "processes{hibernated}", f.gauge(t, "gpusched_processes", labels{"state": "hibernated"}), 1)
	wantEq(t, "reserved frozen once on disk", f.gauge(t, "gpusched_gpu_memory_reserved_bytes", labels{"gpu": "0", "kind": "frozen"}), 0)
	for op, n := range map[string]uint64{"freeze": 1, "hibernate": 1, "thaw": 0, "restore": 0} {
		wantEq(t, op+" count after hibernate", f.count(t, "gpusched_checkpoint_duration_seconds", labels{"op": op}), n)
	}
	wantEq(t, "freeze bytes", f.counter(t, "gpusched_checkpoint_bytes_total", labels{"op": "freeze"}), 512<<20)
	if hr.Written == 0 {
		t.Fatalf("hibernate wrote nothing: %+v", hr)
	}
	wantEq(t, "hibernate bytes", f.counter(t, "gpusched_checkpoint_bytes_total", labels{"op": "hibernate"}), float64(hr.Written))

	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	f = scrape(t, addr)
	for op, n := range map[string]uint64{"freeze": 1, "hibernate": 1, "thaw": 1, "restore": 1} {
		wantEq(t, op+" count after thaw", f.count(t, "gpusched_checkpoint_duration_seconds", labels{"op": op}), n)
	}
	wantEq(t, "restore bytes", f.counter(t, "gpusched_checkpoint_bytes_total", labels{"op": "restore"}), float64(hr.Bytes))
	wantEq(t, "thaw bytes", f.counter(t, "gpusched_checkpoint_bytes_total", labels{"op": "thaw"}), 512<<20)
	wantEq(t, "processes{running}", f.gauge(t, "gpusched_processes", labels{"state": "running"}), 1)
	wantEq(t, "job's VRAM", f.gauge(t, "gpusched_process_vram_bytes", labels{"name": "job"}), 512<<20)
}
