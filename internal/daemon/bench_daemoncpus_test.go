package daemon

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// BenchmarkDaemonCPUsCarry measures what a user's work costs the CPUs set
// apart for the daemon (--daemon-cpus): the built daemon on the first CPU,
// a real user's loop on the others (taskset, and this process there too).
// Each op is one cycle (-benchtime 200x): "run", a run, wait and rm of
// `true`; "freeze", a freeze and thaw of the user's simulated GPU job
// through the cuda-checkpoint driver (the fake tool, a Go binary: what its
// starts cost, not what NVIDIA's tool does). It reports, per cycle, the
// time the daemon's CPU was busy (/proc/stat), the daemon's own CPU time
// (its threads, confined there, but for the one each start forks from, on
// the user's CPUs), and the difference: what else ran on the daemon's CPU,
// a user's work it started there (ticks of 10 ms: a small negative rest is
// the starts' own time, counted as the daemon's and spent elsewhere).
func BenchmarkDaemonCPUsCarry(b *testing.B) {
	daemonCPUs, userCPUs := testutil.CPUsApart(b)
	u := testutil.NewUser(b, "gsdcpub", "gsdcpubg")
	apart := func(c *config.Config) { c.Group, c.DaemonCPUs = u.Group, daemonCPUs }
	b.Run("run", func(b *testing.B) {
		h := prepareHarness(b, apart)
		carry(b, h, u, daemonCPUs, userCPUs, nil, [][]string{{"run", "--dir", "/", "p", "--", "true"}, {"wait", "p"}, {"rm", "p"}})
	})
	b.Run("freeze", func(b *testing.B) {
		h := prepareCkpt(b, config.DriverCLI, apart)
		job := func() {
			h.mustCtl(u, "run", "--dir", "/", "--gpu", "0", "p", "--", h.bins.SimJob, "--vram", "64", "--tick", "0.05")
			h.followCount("p", "tick 1", 1)
		}
		carry(b, h.harness, u, daemonCPUs, userCPUs, job, [][]string{{"freeze", "p"}, {"thaw", "p"}})
	})
}

// carry starts the built daemon of h, then setup (if any), and runs
// cycle, gpuschedctl calls as u on userCPUs, once an op, reporting what
// the daemon's CPUs carried.
func carry(b *testing.B, h *harness, u testutil.User, daemonCPUs, userCPUs string, setup func(), cycle [][]string) {
	dp := h.startBinary()
	pid := dp.cmd.Process.Pid
	testutil.RunSelfOn(b, userCPUs) // the loop's own forks off the daemon's CPU
	if setup != nil {
		setup()
	}
	busy0, self0, start := testutil.CPUBusySeconds(b, daemonCPUs), testutil.CPUSeconds(b, pid), time.Now()
	for b.Loop() {
		for _, args := range cycle {
			if _, stderr, code := h.ctlOn(u, userCPUs, args...); code != 0 {
				b.Fatalf("gpuschedctl %v: exit %d: %s", args, code, stderr)
			}
		}
	}
	wall := time.Since(start)
	busy, self := testutil.CPUBusySeconds(b, daemonCPUs)-busy0, testutil.CPUSeconds(b, pid)-self0
	b.Logf("%d cycles in %v: the daemon's CPU %s busy %.2f s, the daemon %.2f s, the rest %.2f s", b.N, wall.Round(time.Millisecond), daemonCPUs, busy, self, busy-self)
	per := func(s float64) float64 { return s * 1000 / float64(b.N) }
	b.ReportMetric(per(busy), "busy-ms/cycle")
	b.ReportMetric(per(self), "daemon-ms/cycle")
	b.ReportMetric(per(busy-self), "rest-ms/cycle")
}
