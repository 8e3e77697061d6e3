package daemon

import (
	"os/exec"
	"strconv"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// BenchmarkRefusedConnection measures what a connection refused at the
// connection caps costs the daemon (a gpuschedd process, the CPU it spent
// while a user at a share of one has b.N more refused, eight at once, from
// a process of theirs), on the socket and on the metrics port: a user may
// open connections in a loop, and each costs the daemon this.
func BenchmarkRefusedConnection(b *testing.B) {
	u := testutil.NewUser(b, "gsrefusedu", "gsrefused")
	h := prepareHarness(b, func(c *config.Config) {
		c.Group = u.Group
		c.CheckpointDriver = config.DriverSim
	})
	load := buildFairload(b, h.dir)
	metrics := testutil.FreeLoopback(b)
	dp := h.spawnBinary(exec.Command(h.bins.Daemon, append(h.binaryArgs(), "--group", u.Group, "--metrics-addr", metrics,
		"--max-conns-per-user", "1", "--max-metrics-conns-per-user", "1")...))
	waitSocket(b, h.cfg.Socket)
	pid := dp.cmd.Process.Pid
	for _, port := range []struct{ name, addr string }{{"socket", "unix:" + h.cfg.Socket}, {"metrics", "tcp:" + metrics}} {
		b.Run(port.name, func(b *testing.B) {
			c := exec.Command(load, "refused", "-addr", port.addr, "-n", strconv.Itoa(b.N))
			asUser(c, u)
			startReady(b, c, "fairload refused", "holding")
			before := cpuTime(pid)
			b.ResetTimer()
			err := c.Wait()
			b.StopTimer()
			if err != nil {
				b.Fatalf("fairload refused: %v", err)
			}
			b.ReportMetric(float64((cpuTime(pid)-before).Nanoseconds())/float64(b.N), "daemon-ns/refusal")
		})
	}
}
