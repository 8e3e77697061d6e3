package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
)

// BenchmarkFairness runs a fixed workload as one unprivileged user (status,
// connect, run, freeze and thaw, logs -f: fairload victim) three times on one
// daemon: alone; while a second unprivileged user keeps the CPUs busy
// without calling the daemon (fairload burn: the control, what the
// machine's CPU scheduler alone costs the victim); and while that user
// floods the daemon every way issue 20 lists (fairload hostile: idle
// metrics and socket connections, processes with megabyte command lines,
// logs -f streams, queued jobs, leases on every GPU at the highest
// priority, fillers at ratio 1, every line of a 60 MiB log from four
// callers in a loop). It reports the victim's status p99 and run p50 in
// each run and the flood's ratios to the other two (target: within 2x),
// and the daemon's peak RSS and descriptor count. The daemon runs as its
// own process with default limits. The CPU is laid out as systemd and
// logind lay it out (machineSlices): the daemon in a group of the
// system's (with real-time time where the kernel's RT group scheduling
// asks for it), each user's load in a group of its own among the users'.
func BenchmarkFairness(b *testing.B) {
	b.Logf("each user's CPU quota: %d%% of a CPU (0: none; -fairness.cpu-quota); the hostile's CPU weight %d (0: 100; -fairness.hostile-weight); the victim's CPUs %q, the hostile's %q (empty: all; -fairness.victim-cpus, -fairness.hostile-cpus)", *fairnessQuota, *fairnessHostileWeight, *fairnessVictimCPUs, *fairnessHostileCPUs)
	victim := testutil.NewUser(b, "gsfairv", "gsfair")
	hostile := testutil.NewUser(b, "gsfairh", "gsfair")
	h := prepareHarness(b, func(c *config.Config) {
		c.Group = victim.Group
		c.CheckpointDriver = config.DriverSim
		c.Sim = "2x24G"
	})
	load := buildFairload(b, h.dir)
	metrics := testutil.FreeLoopback(b)
	system, users := machineSlices(b)
	env := strings.Fields(*fairnessDaemonEnv)
	if *fairnessTrace != "" {
		env = append(env, TraceEnv+"="+*fairnessTrace)
	}
	dp := h.spawnBinary(inSlice(b, system, h.bins.Daemon, append(append(h.binaryArgs(), "--group", victim.Group, "--metrics-addr", metrics, "--gpu-poll", "1s"), strings.Fields(*fairnessDaemon)...)...), env...)
	waitSocket(b, h.cfg.Socket)
	pid := dp.cmd.Process.Pid
	if *fairnessTrace != "" {
		defer func() { // a clean stop writes the trace's end
			dp.cmd.Process.Signal(syscall.SIGTERM)
			dp.cmd.Wait()
		}()
	}

	echoSlice := system
	if *fairnessEchoApart && system != "" {
		echoSlice = mkSlice(b, cpuRoot(), "gsfair-echo")
	}
	echo := startEcho(b, echoSlice, load, filepath.Join(filepath.Dir(h.cfg.Socket), "echo.sock"))

	victimParent := users
	if *fairnessVictimApart && users != "" {
		victimParent = cpuRoot()
	}
	victimSlice, hostileSlice := userSlice(b, victimParent, victim), userSlice(b, users, hostile)
	allowCPUs(b, victimSlice, *fairnessVictimCPUs)
	allowCPUs(b, hostileSlice, *fairnessHostileCPUs)
	if w := *fairnessHostileWeight; w > 0 && hostileSlice != "" {
		setWeight(b, hostileSlice, w)
	}
	for range b.N {
		alone := watchDaemon(pid)
		calm := runVictim(b, load, victim, victimSlice, h, echo, "alone", map[int]string{pid: "gpuschedd"})
		calmPeak := alone.stop()

		stopBurn, burner := startLoad(b, hostileSlice, load, hostile, "burning", append([]string{"burn"}, strings.Fields(*fairnessBurn)...)...)
		burning := watchDaemon(pid)
		busy := runVictim(b, load, victim, victimSlice, h, echo, "burning", map[int]string{pid: "gpuschedd", burner: "burner"})
		burnPeak := burning.stop()
		stopBurn()

		stopFlood, flooder := startLoad(b, hostileSlice, load, hostile, "flooding",
			append([]string{"hostile", "-socket", h.cfg.Socket, "-metrics", metrics}, strings.Fields(*fairnessHostile)...)...)
		flooded, floodStart := watchDaemon(pid), time.Now()
		stormy := runVictim(b, load, victim, victimSlice, h, echo, "flooded", map[int]string{pid: "gpuschedd", flooder: "hostile"})
		floodPeak, floodTook := flooded.stop(), time.Since(floodStart)
		rtExits := scrape(b, metrics).counter(b, "gpusched_daemon_realtime_exits_total", nil)
		tally, hostileCPU := stopFlood()
		b.Logf("hostile: %s", strings.Join(tally, "; "))
		b.Logf("%-12s %-24s | %-24s | %s", "", "alone", "the hostile user burning CPU", "the hostile user flooding the daemon")
		for _, op := range []string{"status", "echo", "connect", "run", "freeze+thaw", "logs-f"} {
			b.Logf("%-12s p50 %7.2f p99 %7.2f ms | p50 %7.2f p99 %7.2f ms | p50 %7.2f p99 %7.2f ms", op,
				calm[op].P50, calm[op].P99, busy[op].P50, busy[op].P99, stormy[op].P50, stormy[op].P99)
		}
		for _, phase := range []struct {
			name string
			ops  map[string]victimOp
		}{{"alone", calm}, {"burning", busy}, {"flooded", stormy}} {
			b.Logf("the slowest freeze+thaw %s, in ms: %s", phase.name, msParts(phase.ops["freeze+thaw"].Slowest))
		}
		b.Logf("daemon alone: RSS %d MiB, %d fds, %v CPU, %v waiting for a CPU; flooded (%v): RSS %d MiB, %d fds, %v CPU, %v waiting for a CPU, left real time %.0f times since its start; the hostile's own load used %v CPU",
			calmPeak.rss>>20, calmPeak.fds, calmPeak.cpu, calmPeak.delay, floodTook.Round(time.Second), floodPeak.rss>>20, floodPeak.fds, floodPeak.cpu, floodPeak.delay, rtExits, hostileCPU)
		b.Logf("the machine's %d CPUs: %.1f busy on average alone (%.2f stolen by the hypervisor), %.1f burning (%.2f), %.1f flooded (%.2f)",
			runtime.NumCPU(), calmPeak.busy, calmPeak.steal, burnPeak.busy, burnPeak.steal, floodPeak.busy, floodPeak.steal)
		b.ReportMetric(calm["status"].P99, "status-p99-alone-ms")
		b.ReportMetric(busy["status"].P99, "status-p99-burn-ms")
		b.ReportMetric(stormy["status"].P99, "status-p99-hostile-ms")
		b.ReportMetric(stormy["status"].P99/calm["status"].P99, "status-p99-x")
		b.ReportMetric(stormy["status"].P99/busy["status"].P99, "status-p99-x-burn")
		b.ReportMetric(stormy["echo"].P99/calm["echo"].P99, "echo-p99-x")
		b.ReportMetric((stormy["status"].P99/calm["status"].P99)/(stormy["echo"].P99/calm["echo"].P99), "status-p99-x-echo")
		b.ReportMetric(stormy["connect"].P99/calm["connect"].P99, "connect-p99-x")
		b.ReportMetric(calm["run"].P50, "run-p50-alone-ms")
		b.ReportMetric(busy["run"].P50, "run-p50-burn-ms")
		b.ReportMetric(stormy["run"].P50, "run-p50-hostile-ms")
		b.ReportMetric(stormy["run"].P50/calm["run"].P50, "run-p50-x")
		b.ReportMetric(stormy["run"].P50/busy["run"].P50, "run-p50-x-burn")
		b.ReportMetric(stormy["freeze+thaw"].P50/calm["freeze+thaw"].P50, "swap-p50-x")
		b.ReportMetric(stormy["logs-f"].P50/calm["logs-f"].P50, "follow-p50-x")
		b.ReportMetric(float64(calmPeak.rss>>20), "rss-alone-MiB")
		b.ReportMetric(float64(floodPeak.rss>>20), "rss-hostile-MiB")
		b.ReportMetric(float64(floodPeak.fds), "fds-hostile")
	}
}

// startLoad starts fairload args as u in slice and waits for its ready
// line; the function it returns stops it with SIGTERM and gives what it
// printed after that line and the CPU it used. pid is the load's process.
func startLoad(b *testing.B, slice, load string, u testutil.User, ready string, args ...string) (stop func() ([]string, time.Duration), pid int) {
	b.Helper()
	prog, argv := onCPUs(*fairnessHostileCPUs, load, args)
	c := inSlice(b, slice, prog, argv...)
	asUser(c, u)
	lines := startReady(b, c, "fairload "+args[0], ready)
	return func() ([]string, time.Duration) {
		c.Process.Signal(syscall.SIGTERM)
		var rest []string
		for lines.Scan() {
			rest = append(rest, lines.Text())
		}
		c.Wait()
		return rest, c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}, c.Process.Pid
}

// startEcho starts fairload echo on path, as root in the daemon's slice,
// for the test's life; it returns path.
func startEcho(b *testing.B, slice, load, path string) string {
	b.Helper()
	c := inSlice(b, slice, load, "echo", "-socket", path)
	startReady(b, c, "fairload echo", "serving")
	b.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
	})
	return path
}

// startReady starts c (name, in messages) and waits for its first line,
// ready; it returns the rest of what c prints.
func startReady(b *testing.B, c *exec.Cmd, name, ready string) *bufio.Scanner {
	b.Helper()
	out, err := c.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	c.Stderr = os.Stderr
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != ready {
		c.Process.Kill()
		c.Wait()
		b.Fatalf("%s: %q", name, lines.Text())
	}
	return lines
}

// victimOp is one operation's latencies from fairload victim.
type victimOp struct {
	Op  string  `json:"op"`
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	// Times are the status calls' (-times).
	Times [][2]int64 `json:"times"`
	// Slowest is where the slowest call spent its time (freeze+thaw).
	Slowest map[string]float64 `json:"slowest"`
}

// victimRuns counts the victim's runs, to name their files beside the trace.
var victimRuns int

func runVictim(b *testing.B, load string, u testutil.User, slice string, h *harness, echo, phase string, roles map[int]string) map[string]victimOp {
	b.Helper()
	args := append([]string{"victim", "-socket", h.cfg.Socket, "-simjob", h.bins.SimJob, "-echo", echo}, strings.Fields(*fairnessVictim)...)
	if *fairnessTrace != "" || *fairnessSched {
		args = append(args, "-times")
	}
	prog, argv := onCPUs(*fairnessVictimCPUs, load, args)
	c := inSlice(b, slice, prog, argv...)
	asUser(c, u)
	c.Stderr = os.Stderr
	rec := startSchedRecording(b)
	out, err := c.Output()
	if err != nil {
		b.Fatalf("victim: %v", err)
	}
	if *fairnessTrace != "" {
		victimRuns++
		if err := os.WriteFile(fmt.Sprintf("%s.victim%d", *fairnessTrace, victimRuns), out, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var ops []victimOp
	if err := json.Unmarshal(out, &ops); err != nil {
		b.Fatalf("victim: %v: %s", err, out)
	}
	m := map[string]victimOp{}
	for _, op := range ops {
		m[op.Op] = op
	}
	if rec != nil {
		roles[c.Process.Pid] = "victim"
		logSchedWaits(b, rec, phase, roles, m["status"].Times)
	}
	return m
}

// asUser runs c as u, in u's group, from /.
func asUser(c *exec.Cmd, u testutil.User) {
	c.Dir = "/"
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Credential = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()}
}

// buildFairload builds the load generator into dir, or takes it from the
// prebuilt binaries ($GPUSCHED_TEST_BINARIES) on a machine without Go.
func buildFairload(b *testing.B, dir string) string {
	b.Helper()
	if pre := os.Getenv(testutil.PrebuiltEnv); pre != "" {
		bin := filepath.Join(pre, "fairload")
		if _, err := os.Stat(bin); err != nil {
			b.Fatalf("%s: %v (build it with go build -o %s ./internal/testutil/fairload)", testutil.PrebuiltEnv, err, bin)
		}
		return bin
	}
	root, err := testutil.ModuleRoot()
	if err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "fairload")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/testutil/fairload")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build fairload: %v\n%s", err, out)
	}
	return bin
}

// waitSocket waits until a daemon answers on path.
func waitSocket(b *testing.B, path string) {
	b.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("no daemon on %s", path)
		}
	}
}

// peak is the most a daemon held while watched, and the CPU it used.
type peak struct {
	rss   uint64
	fds   int
	cpu   time.Duration
	delay time.Duration // its threads' time runnable but waiting for a CPU (schedstat)
	// the machine's CPUs busy on average over the phase, and of that the
	// time a hypervisor ran something else (steal)
	busy, steal float64
}

// daemonWatch samples a daemon's RSS and descriptors until stopped.
type daemonWatch struct {
	pid   int
	host0 hostTicks
	cpu0  time.Duration
	wait0 map[string]time.Duration
	stopc chan struct{}
	done  sync.WaitGroup
	max   peak
}

func watchDaemon(pid int) *daemonWatch {
	w := &daemonWatch{stopc: make(chan struct{}), pid: pid, host0: readHostTicks(), cpu0: cpuTime(pid), wait0: runDelays(pid)}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			w.sample(pid)
			select {
			case <-w.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *daemonWatch) sample(pid int) {
	dir := "/proc/" + strconv.Itoa(pid)
	if fds, err := os.ReadDir(dir + "/fd"); err == nil {
		w.max.fds = max(w.max.fds, len(fds))
	}
	status, err := procfs.ReadFile(dir+"/status", procfs.MaxStatus)
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			w.max.rss = max(w.max.rss, kb<<10)
		}
	}
}

func (w *daemonWatch) stop() peak {
	close(w.stopc)
	w.done.Wait()
	w.max.cpu = cpuTime(w.pid) - w.cpu0
	w.max.delay = runDelaySince(w.pid, w.wait0)
	w.max.busy, w.max.steal = readHostTicks().since(w.host0)
	return w.max
}

// hostTicks is the machine's CPU time so far, in clock ticks, from the
// first line of /proc/stat (proc_stat(5): user, nice, system, idle,
// iowait, irq, softirq, steal; guest time is within user's).
type hostTicks struct{ busy, steal, all uint64 }

func readHostTicks() hostTicks {
	var t hostTicks
	b, err := procfs.ReadFile("/proc/stat", procfs.MaxStatus)
	if err != nil {
		return t
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	for i := 1; i < len(f) && i <= 8; i++ {
		n, _ := strconv.ParseUint(f[i], 10, 64)
		t.all += n
		switch i {
		case 4, 5: // idle, iowait
		case 8:
			t.steal += n
		default:
			t.busy += n
		}
	}
	return t
}

// since is how many of the machine's CPUs were busy on average since t0,
// and how many a hypervisor had taken (steal).
func (t hostTicks) since(t0 hostTicks) (busy, steal float64) {
	all := t.all - t0.all
	if all == 0 {
		return 0, 0
	}
	cpus := float64(runtime.NumCPU())
	return cpus * float64(t.busy-t0.busy) / float64(all), cpus * float64(t.steal-t0.steal) / float64(all)
}

// runDelays is how long each live thread of process pid has waited on a
// run queue for a CPU (the second field of /proc/PID/task/TID/schedstat).
func runDelays(pid int) map[string]time.Duration {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := make(map[string]time.Duration, len(tasks))
	for _, t := range tasks {
		b, err := procfs.ReadFile(filepath.Join(dir, t.Name(), "schedstat"), procfs.MaxStatus)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			out[t.Name()] = time.Duration(ns)
		}
	}
	return out
}

// runDelaySince is how long pid's threads waited for a CPU since before
// was taken: per thread, so that a thread ending meanwhile takes nothing
// off (its wait is lost, not subtracted).
func runDelaySince(pid int, before map[string]time.Duration) time.Duration {
	var sum time.Duration
	for tid, d := range runDelays(pid) {
		sum += d - before[tid]
	}
	return sum
}

// cpuTime is the user and system CPU time process pid has used.
func cpuTime(pid int) time.Duration {
	stat, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/stat", procfs.MaxStatus)
	if err != nil {
		return 0
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	f := strings.Fields(after)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

var fairnessHostile = flag.String("fairness.hostile", "", "BenchmarkFairness: more flags for fairload hostile, space-separated (e.g. \"-jobs 0\")")

var fairnessVictim = flag.String("fairness.victim", "", "BenchmarkFairness: more flags for fairload victim, space-separated (\"-status 500 -status-every 0\": the status calls back to back, as before 2026-11-26)")

var fairnessBurn = flag.String("fairness.burn", "", "BenchmarkFairness: more flags for the control, fairload burn (\"-decode\": the hostile readers' own decoding, without the daemon; \"-decode -workers 4 -pause 2ms\": in bursts with sleeps between, as the readers waiting on replies)")

var fairnessTrace = flag.String("fairness.trace", "", "BenchmarkFairness: write the daemon's execution trace to this file ("+TraceEnv+"), and the victim's status calls' times to FILE.victimN")

var (
	fairnessVictimCPUs  = flag.String("fairness.victim-cpus", "", "BenchmarkFairness: the CPUs the victim runs on, a taskset list (\"0-3\"; empty: all), as an operator gives a user's slice CPUs of its own (systemd's AllowedCPUs=)")
	fairnessHostileCPUs = flag.String("fairness.hostile-cpus", "", "BenchmarkFairness: the CPUs the hostile user's load (burner and flood) runs on, as -fairness.victim-cpus")
)

// allowCPUs gives a user's cgroup slice the CPUs cpus (a CPU list) as
// systemd's AllowedCPUs= does, where cgroup v2 has a cpuset controller to
// hand down, as a second bound beside the load's taskset, whose CPUs what
// the daemon starts for the user keeps (trees, their CRIU, log readers:
// their caller's). Where it cannot, it says so, and taskset alone divides
// the users' CPUs.
func allowCPUs(b *testing.B, slice, cpus string) {
	if slice == "" || cpus == "" {
		return
	}
	root := cpuRoot()
	err := errors.New("no cgroup v2 CPU hierarchy")
	if root == "/sys/fs/cgroup" {
		var parents []string
		for dir := filepath.Dir(slice); strings.HasPrefix(dir, root); dir = filepath.Dir(dir) {
			parents = append([]string{dir}, parents...)
		}
		err = nil
		for _, dir := range parents {
			if err = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+cpuset"), 0); err != nil {
				break
			}
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(slice, "cpuset.cpus"), []byte(cpus), 0)
		}
	}
	if err != nil {
		b.Logf("%s: CPUs %s by taskset alone (no cpuset.cpus: %v), which what the daemon starts for the user keeps", filepath.Base(slice), cpus, err)
		return
	}
	b.Logf("%s: CPUs %s by cpuset.cpus (AllowedCPUs=) and taskset", filepath.Base(slice), cpus)
}

// onCPUs is the program and arguments that run load's args on cpus (a
// taskset list; empty: load's args as they are).
func onCPUs(cpus, load string, args []string) (string, []string) {
	if cpus == "" {
		return load, args
	}
	return "taskset", append([]string{"-c", cpus, load}, args...)
}

var fairnessEchoApart = flag.Bool("fairness.echo-apart", false, "BenchmarkFairness: run the echo control in a top-level CPU group of its own, beside the daemon's and the users' (default: in the daemon's)")

var fairnessDaemonEnv = flag.String("fairness.daemon-env", "", "BenchmarkFairness: more environment for the daemon, space-separated NAME=VALUE (e.g. \"GOMAXPROCS=1\")")

var fairnessVictimApart = flag.Bool("fairness.victim-apart", false, "BenchmarkFairness: run the victim in a top-level CPU group of its own, beside the daemon's and the users' (default: among the users', beside the hostile's)")

var fairnessDaemon = flag.String("fairness.daemon", "", "BenchmarkFairness: more flags for the daemon, space-separated (e.g. \"--cpu-slice 0\")")

// fairnessQuota caps each user's CPU cgroup in BenchmarkFairness, in
// percent of one CPU, as an operator may cap users' slices (systemd's
// CPUQuota= on user-UID.slice); 0 leaves them uncapped.
var fairnessQuota = flag.Int("fairness.cpu-quota", 0, "BenchmarkFairness: each user's CPU quota, percent of one CPU (0: none)")

// cpuRoot is the CPU controller's hierarchy: cgroup v2's unified one, or
// v1's cpu hierarchy; "" where there is none.
func cpuRoot() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.subtree_control"); err == nil {
		return "/sys/fs/cgroup"
	}
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.shares"); err == nil {
		return "/sys/fs/cgroup/cpu"
	}
	return ""
}

// machineSlices lays the CPU out as systemd does on a machine with logind:
// the daemon in a group of the system's (system.slice: gpuschedd.service)
// and every user's load in a group of its own under one group of the
// users' (user.slice/user-UID.slice), the two top groups at equal weight,
// systemd's default. Both are "" where there is no CPU controller.
func machineSlices(b *testing.B) (system, users string) {
	root := cpuRoot()
	if root == "" {
		b.Logf("no CPU cgroup: the daemon and each user's load share the machine's CPUs as plain processes")
		return "", ""
	}
	system, users = mkSlice(b, root, "gsfair-system"), mkSlice(b, root, "gsfair-users")
	giveRealtime(b, root, system)
	if root == "/sys/fs/cgroup" {
		if err := os.WriteFile(filepath.Join(users, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			b.Fatalf("enable the cpu controller in %s: %v", users, err)
		}
	}
	return system, users
}

// giveRealtime gives group the real-time time of its parent where the
// kernel's RT group scheduling (cgroup v1's cpu.rt_runtime_us) would
// leave it none, as an operator lets a daemon's service run at
// --realtime-priority.
func giveRealtime(b *testing.B, parent, group string) {
	rt, err := os.ReadFile(filepath.Join(parent, "cpu.rt_runtime_us"))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(group, "cpu.rt_runtime_us"), rt, 0)
	}
	if err != nil {
		b.Fatalf("real-time time for %s: %v", group, err)
	}
}

// mkSlice makes the cgroup parent/name (or takes one an earlier run left)
// and removes it when b ends.
func mkSlice(b *testing.B, parent, name string) string {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		b.Fatalf("cgroup %s: %v", dir, err)
	}
	b.Cleanup(func() { os.Remove(dir) })
	return dir
}

// userSlice makes u's CPU group under parent (the users' group from
// machineSlices, or the top), that u may move itself into; "" where
// parent is.
func userSlice(b *testing.B, parent string, u testutil.User) string {
	if parent == "" {
		return ""
	}
	dir := mkSlice(b, parent, "gsfair-"+u.Name)
	if err := os.Chown(filepath.Join(dir, "cgroup.procs"), int(u.UID), int(u.GID)); err != nil {
		b.Fatal(err)
	}
	if q := *fairnessQuota; q > 0 {
		setQuota(b, dir, q)
	}
	return dir
}

// inSlice is the command that runs load's args in slice (from
// machineSlices or userSlice). Under cgroup v2 the kernel starts it there
// (clone3 into the group, as systemd starts a unit): a user may not move
// itself out of root's group, which takes write access to the two groups'
// common ancestor. Under v1 it moves itself.
func inSlice(b *testing.B, slice, load string, args ...string) *exec.Cmd {
	if slice == "" {
		return exec.Command(load, args...)
	}
	if cpuRoot() == "/sys/fs/cgroup" {
		dir, err := os.Open(slice)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dir.Close() })
		c := exec.Command(load, args...)
		c.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
		return c
	}
	return exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, slice, load}, args...)...)
}

// fairnessHostileWeight gives the hostile user's CPU group a weight of its
// own, as an operator may lower an untrusted user's (systemd's CPUWeight=
// on user-UID.slice); 0 leaves it at the default, 100.
var fairnessHostileWeight = flag.Int("fairness.hostile-weight", 0, "BenchmarkFairness: the hostile user's CPU weight, 1 to 10000 as systemd's CPUWeight= (0: the default, 100)")

// setWeight sets cgroup dir's CPU weight (cgroup v2 cpu.weight, else v1
// cpu.shares at 1024 for 100, as systemd maps it).
func setWeight(b *testing.B, dir string, weight int) {
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.Itoa(weight)), 0); err == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.Itoa(max(2, weight*1024/100))), 0); err != nil {
		b.Fatalf("cpu weight of %s: %v", dir, err)
	}
}

// setQuota caps cgroup dir at pct percent of one CPU (cgroup v2 cpu.max,
// else v1 cpu.cfs_quota_us).
func setQuota(b *testing.B, dir string, pct int) {
	period := 100000
	quota := period * pct / 100
	if err := os.WriteFile(filepath.Join(dir, "cpu.max"), []byte(fmt.Sprintf("%d %d", quota, period)), 0); err == nil {
		return
	}
	if err := os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0); err != nil {
		b.Fatalf("cpu quota of %s: %v", dir, err)
	}
}

// msParts writes parts (name: ms) sorted by name.
func msParts(parts map[string]float64) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(parts)) {
		out = append(out, fmt.Sprintf("%s %.1f", k, parts[k]))
	}
	return strings.Join(out, ", ")
}
