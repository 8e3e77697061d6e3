package daemon

import (
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/cpuslice"
	"github.com/gpusched/gpusched/internal/rtprio"
	"github.com/gpusched/gpusched/internal/testutil"
)

// The built daemon, at its defaults, runs every thread at real time
// (--realtime-priority), threads the runtime adds later too, while the
// trees it starts (the supervisor and the user's command) begin in the
// fair class; its metrics say it is at real time.
func TestDaemonThreadsAtRealTimeTreesInTheFairClass(t *testing.T) {
	want := config.Default().RealtimePriority
	if want == 0 {
		t.Fatal("default --realtime-priority 0: want the daemon at real time")
	}
	needRealtime(t)
	h := prepareHarness(t)
	addr := testutil.FreeLoopback(t)
	dp := h.startBinary("--metrics-addr", addr)
	p := h.run("worker", "sleep", "1000")
	t.Cleanup(func() { unix.Kill(p.InitPID, unix.SIGKILL) })

	for _, pid := range []int{p.InitPID, p.PID} {
		if policy, prio, err := rtprio.Of(pid); err != nil || policy != unix.SCHED_NORMAL || prio != 0 {
			t.Errorf("managed pid %d: policy %d priority %d (%v); want the fair class (SCHED_OTHER)", pid, policy, prio, err)
		}
	}
	daemon := dp.cmd.Process.Pid
	waitThreads(t, daemon, "not at SCHED_FIFO "+strconv.Itoa(want), func(tid int) bool {
		policy, prio, err := rtprio.Of(tid)
		return err != nil || policy == unix.SCHED_FIFO && prio == want
	})
	waitScraped(t, addr, "gpusched_daemon_realtime 1", func(f families) bool {
		return f.gauge(t, "gpusched_daemon_realtime", nil) == 1
	})
}

// A daemon that uses more than --realtime-cpu leaves real time, and says
// so in its metrics: here a budget below what its own tickers use.
func TestRealtimeBudgetExitsCounted(t *testing.T) {
	needRealtime(t)
	h := prepareHarness(t)
	addr := testutil.FreeLoopback(t)
	h.startBinary("--realtime-cpu", "0.00001", "--metrics-addr", addr)
	waitScraped(t, addr, "gpusched_daemon_realtime_exits_total at least 1", func(f families) bool {
		return f.counter(t, "gpusched_daemon_realtime_exits_total", nil) >= 1
	})
}

// waitScraped polls the metrics at addr until ok holds (what says what it
// waits for): the daemon's passes over its threads and its budget's
// checks happen on its own clock, and nothing else says when.
func waitScraped(t *testing.T, addr, what string, ok func(families) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok(scrape(t, addr)) {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 30 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// needRealtime skips where the kernel gives this test's processes no
// real-time class (no CAP_SYS_NICE, or RT group scheduling leaving this
// CPU group no time), where the daemon would run in the fair class.
func needRealtime(t *testing.T) {
	t.Helper()
	if err := unix.SchedSetAttr(testutil.Sleeper(t), &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0); err != nil {
		t.Skipf("no real-time class here: %v", err)
	}
}

// With --realtime-priority 0 the built daemon runs every thread at
// --cpu-slice's default, threads the runtime adds later too, while the
// trees it starts begin at the kernel's default; its metrics say it is not
// at real time.
func TestDaemonThreadsAtTheSliceTreesAtTheDefault(t *testing.T) {
	def := kernelDefaultSlice(t)
	want := config.Default().CPUSlice
	if want == 0 || want == def {
		t.Fatalf("default --cpu-slice %v: want a slice other than the kernel's %v", want, def)
	}
	h := prepareHarness(t)
	addr := testutil.FreeLoopback(t)
	dp := h.startBinary("--realtime-priority", "0", "--metrics-addr", addr)
	p := h.run("worker", "sleep", "1000")
	t.Cleanup(func() { unix.Kill(p.InitPID, unix.SIGKILL) })

	for _, pid := range []int{p.InitPID, p.PID} {
		if got, err := cpuslice.Of(pid); err != nil || got != def {
			t.Errorf("managed pid %d: slice %v (%v); want the kernel's default %v", pid, got, err, def)
		}
	}
	waitThreads(t, dp.cmd.Process.Pid, "not at slice "+want.String(), func(tid int) bool {
		got, err := cpuslice.Of(tid)
		return err != nil || got == want
	})
	if got := scrape(t, addr).gauge(t, "gpusched_daemon_realtime", nil); got != 0 {
		t.Errorf("gpusched_daemon_realtime %v in the fair class; want 0", got)
	}
}

// kernelDefaultSlice is the slice of a process started afresh; it skips
// where the kernel keeps no per-thread slice.
func kernelDefaultSlice(t *testing.T) time.Duration {
	t.Helper()
	def, err := cpuslice.Of(testutil.Sleeper(t))
	if err != nil || def == 0 {
		t.Skipf("no per-thread slice here (Linux 6.12+): %v", err)
	}
	return def
}

// waitThreads waits for every thread of pid to be as ok says. Threads the
// runtime started since the daemon's last pass over them are brought at
// its next (a poll: no event says so).
func waitThreads(t *testing.T, pid int, what string, ok func(tid int) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for off := threadsNot(t, pid, ok); len(off) > 0; off = threadsNot(t, pid, ok) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon threads %v %s after 30 s", off, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// threadsNot lists pid's threads that are not as ok says.
func threadsNot(t *testing.T, pid int, ok func(tid int) bool) []int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	var off []int
	for _, n := range names {
		if tid, _ := strconv.Atoi(n); !ok(tid) {
			off = append(off, tid)
		}
	}
	return off
}
