package daemon

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkIdleQueue queues 100,000 jobs that cannot start (one GPU, held
// by a running job) and measures the CPU the gpuschedd binary burns while
// nothing changes, sampling its GPU at the default --gpu-poll (1s): the
// CPU seconds per wall second, over b.N seconds of "idle" (the queue is
// built once, outside it: about two minutes). An idle daemon should burn
// next to nothing, whatever it keeps queued.
func BenchmarkIdleQueue(b *testing.B) {
	const queued, batch = 100_000, 5_000
	h := prepareCkpt(b, config.DriverSim, func(c *config.Config) { c.Sim = "1x24G" })
	dp := h.spawnIdleBinary()
	h.submit(api.JobSpec{Name: "hold", Cmd: h.simjob("--vram", "20480"), VRAM: api.VRAM{MiB: 20480}})
	h.waitJobState("hold", api.JobRunning)
	for n := 0; n < queued; n += batch {
		specs := make([]api.JobSpec, batch)
		for i := range specs {
			specs[i] = api.JobSpec{Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 8 << 10}, Priority: i % 5}
		}
		if _, err := h.client().Submit(ctxT(b), api.SubmitParams{Jobs: specs, JobSpec: api.JobSpec{Dir: "/", Env: map[string]string{"PATH": "/usr/bin:/bin"}}}); err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // the passes the submissions asked for, and the GC after them, are not what this measures
	b.Run("idle", func(b *testing.B) { measureIdle(b, dp, fmt.Sprintf("%d queued jobs", queued)) })
}

// BenchmarkIdleDaemon measures the CPU the gpuschedd binary burns at its
// defaults with nothing to do (no process, no job, one simulated GPU
// sampled each --gpu-poll): its own timers, such as its real-time budget's
// checks (docs/operations.md, "The daemon's CPU class"), in CPU seconds
// per wall second over b.N seconds.
func BenchmarkIdleDaemon(b *testing.B) {
	h := prepareCkpt(b, config.DriverSim, func(c *config.Config) { c.Sim = "1x24G" })
	dp := h.spawnIdleBinary()
	time.Sleep(3 * time.Second) // start-up's work is not what this measures
	b.Run("idle", func(b *testing.B) { measureIdle(b, dp, "nothing to do") })
}

// measureIdle reports the CPU dp uses over b.N seconds of wall time.
func measureIdle(b *testing.B, dp *daemonProc, what string) {
	pid := dp.cmd.Process.Pid
	cpu0, t0 := testutil.CPUSeconds(b, pid), time.Now()
	for range b.N {
		time.Sleep(time.Second)
	}
	wall := time.Since(t0).Seconds()
	cpu := testutil.CPUSeconds(b, pid) - cpu0
	b.ReportMetric(cpu/wall, "CPU-s/s")
	b.Logf("%s, idle: gpuschedd used %.4f CPU s per s over %.1f s", what, cpu/wall, wall)
}

// spawnIdleBinary starts gpuschedd at the default GPU sampling interval.
func (h *ckptHarness) spawnIdleBinary() *daemonProc {
	h.t.Helper()
	args := append(h.binaryArgs(), "--gpu-poll", config.Default().GPUPoll.String())
	n := testutil.NewNotify(h.t, h.dir)
	dp := h.spawnBinary(exec.Command(h.bins.Daemon, args...), "NOTIFY_SOCKET="+n.Path)
	n.WaitFor(h.t, "READY=1", 30*time.Second)
	return dp
}
