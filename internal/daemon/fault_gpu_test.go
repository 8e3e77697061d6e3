package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// setGPUFaults injects NVML failures into the simulated GPUs, through the
// sim directory's faults.json (simgpu.SetFaults).
func (h *ckptHarness) setGPUFaults(f simgpu.Faults) {
	h.t.Helper()
	if err := h.reg.SetFaults(f); err != nil {
		h.t.Fatal(err)
	}
}

// waitReason waits until the scheduler gives queued job name a reason
// containing want, and returns the job.
func (h *ckptHarness) waitReason(name, want string) *api.Job {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		j := h.job(name)
		if j.State == api.JobQueued && strings.Contains(j.Reason, want) {
			return j
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("job %s: %s, reason %q; want queued with a reason containing %q", name, j.State, j.Reason, want)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestGPUSampleFailureIsStaleAndHoldsQueue: while every GPU sample fails
// (NVML "GPU is lost"), status and gpus keep answering with the last good
// sample, say it is stale and why, and the queue places nothing: a job
// submitted meanwhile waits with reason stale_gpu_data, through a daemon
// restart (which boots despite the failing sample), and starts once a
// sample succeeds. Managed processes stay tracked and running throughout.
func TestGPUSampleFailureIsStaleAndHoldsQueue(t *testing.T) {
	h := newQueueHarness(t, "2x4G")
	c := h.client()
	h.jobs("p", 0, 300)

	h.setGPUFaults(simgpu.Faults{SampleError: "GPU is lost"})
	if err := h.d.sampler.refresh(ctxT(t)); err == nil || !strings.Contains(err.Error(), "GPU is lost") {
		t.Fatalf("refresh with a failing NVML = %v; want the error", err)
	}
	checkStale := func() {
		t.Helper()
		st, err := c.Status(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(st.GPUError, "GPU is lost") || len(st.GPUs) != 2 {
			t.Fatalf("status while sampling fails: gpu_error %q, %d GPUs; want the error and both GPUs", st.GPUError, len(st.GPUs))
		}
		for _, g := range st.GPUs {
			if !strings.Contains(g.Error, "stale") || !strings.Contains(g.Error, "GPU is lost") || g.TotalMiB != 4096 {
				t.Errorf("status GPU %d while sampling fails: %+v; want stale with the error and its last memory", g.Index, g)
			}
		}
		gs, err := c.GPUs(ctxT(t))
		if err != nil || len(gs) != 2 {
			t.Fatalf("gpus while sampling fails: %+v, %v", gs, err)
		}
		for _, g := range gs {
			if g.Healthy || len(g.Unhealthy) == 0 || !strings.Contains(g.Unhealthy[0], "data is stale") || g.Error != g.Unhealthy[0] {
				t.Errorf("gpus GPU %d while sampling fails: healthy %v, unhealthy %q, error %q", g.Index, g.Healthy, g.Unhealthy, g.Error)
			}
		}
		if p := h.proc("p"); p.State != api.StateRunning {
			t.Errorf("p while sampling fails: %s; want still running", p.State)
		}
	}
	checkStale()

	// A job that fits anywhere waits: placing on stale data could
	// oversubscribe a GPU.
	h.submit(api.JobSpec{Name: "q", Cmd: h.simjob("--vram", "512"), VRAM: api.VRAM{MiB: 512}})
	if j := h.waitReason("q", string(reasonStaleGPUs)); !strings.Contains(j.Reason, "GPU is lost") {
		t.Errorf("q waits with %q; want the sampling error", j.Reason)
	}

	// The daemon restarts while the GPU is still lost: it serves, still
	// stale, the job still waits and p is re-adopted.
	h.stop()
	h.begin()
	c = h.client()
	checkStale()
	h.waitReason("q", string(reasonStaleGPUs))

	// The GPU comes back: a good sample clears it all and q starts.
	h.setGPUFaults(simgpu.Faults{})
	h.refresh()
	h.waitRunning("q")
	st, err := c.Status(ctxT(t))
	if err != nil || st.GPUError != "" || st.GPUs[0].Error != "" || st.GPUs[0].UsedMiB < 300 {
		t.Fatalf("status after recovery: %+v, %v", st, err)
	}
	for _, g := range mustGPUs(t, c) {
		if !g.Healthy || g.Error != "" {
			t.Errorf("GPU %d after recovery: %+v", g.Index, g)
		}
	}
}

func mustGPUs(t *testing.T, c *api.Client) []api.GPU {
	t.Helper()
	gs, err := c.GPUs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// TestGPUMissingIsReportedAndRefused: a GPU that drops out of the driver's
// list (fell off the bus) stays listed, unhealthy, with its last memory;
// the process on it stays tracked; run, fill, acquire and thaw aimed at it
// are refused with unavailable and a sentence naming it; a job needing both
// GPUs waits (is not declared infeasible). A GPU whose queries fail is
// reported and skipped the same way. The missing GPU is still reported
// after a daemon restart, and when it comes back everything resumes.
func TestGPUMissingIsReportedAndRefused(t *testing.T) {
	h := newQueueHarness(t, "2x4G")
	c := h.client()
	onGPU1 := h.jobs("p", 1, 300)
	h.jobs("f", 1, 200)
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "f"}); err != nil {
		t.Fatal(err)
	}
	uuid1 := simgpu.DeviceUUID(1)
	h.setGPUFaults(simgpu.Faults{Missing: []string{uuid1}})
	h.refresh()

	checkMissing := func() {
		t.Helper()
		gs := mustGPUs(t, c)
		if len(gs) != 2 || gs[1].UUID != uuid1 {
			t.Fatalf("gpus with GPU 1 missing: %+v; want it still listed", gs)
		}
		g := gs[1]
		if g.Healthy || !strings.Contains(g.Error, "is missing") || len(g.Unhealthy) == 0 || g.Unhealthy[0] != g.Error || g.TotalMiB != 4096 {
			t.Errorf("missing GPU 1: %+v; want unhealthy, missing, with its total", g)
		}
		if !gs[0].Healthy || gs[0].Error != "" {
			t.Errorf("GPU 0 with GPU 1 missing: %+v; want healthy", gs[0])
		}
		st, err := c.Status(ctxT(t))
		if err != nil || st.GPUError != "" || len(st.GPUs) != 2 || !strings.Contains(st.GPUs[1].Error, "is missing") {
			t.Errorf("status with GPU 1 missing: %+v, %v", st, err)
		}
		if p := h.proc("p"); p.State != api.StateRunning || p.InitPID != onGPU1.InitPID {
			t.Errorf("p with its GPU missing: %+v; want still tracked, running", p)
		}
		if p := h.proc("f"); p.State != api.StateFrozen {
			t.Errorf("f with its GPU missing: %s; want frozen", p.State)
		}
	}
	checkMissing()
	refused := func(what string, err error) {
		t.Helper()
		wantCode(t, err, api.CodeUnavailable)
		if err == nil || !strings.Contains(err.Error(), "GPU 1") || !strings.Contains(err.Error(), "missing") {
			t.Errorf("%s on the missing GPU: %v; want it named as missing", what, err)
		}
	}
	_, err := c.Run(ctxT(t), api.RunParams{Name: "r", Dir: "/", GPU: &api.GPURef{Index: 1}, Cmd: []string{"true"}})
	refused("run", err)
	_, err = c.Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 1}, MiB: api.VRAM{MiB: 1024}})
	refused("fill", err)
	_, err = c.Acquire(ctxT(t), api.AcquireParams{GPUIDs: []api.GPURef{{UUID: uuid1}}})
	refused("acquire", err)
	_, err = c.Thaw(ctxT(t), api.ThawParams{Name: "f"})
	refused("thaw", err)
	if p := h.proc("f"); p.State != api.StateFrozen || p.Error != "" {
		t.Errorf("f after a refused thaw: %+v; want frozen, unchanged", p)
	}
	if _, err := c.PS(ctxT(t), api.PSParams{}); err != nil {
		t.Fatal(err)
	}

	// A job that needs both GPUs waits for the missing one; it is not
	// infeasible.
	h.submit(api.JobSpec{Name: "both", GPUs: 2, Cmd: h.simjob("--vram", "256"), VRAM: api.VRAM{MiB: 256}})
	h.waitReason("both", "is missing")

	// A GPU whose queries fail (NVML "Unknown Error" on GPU 0) is lost too.
	h.setGPUFaults(simgpu.Faults{Missing: []string{uuid1}, DeviceErrors: map[string]string{simgpu.DeviceUUID(0): "memory info: Unknown Error"}})
	h.refresh()
	g0 := mustGPUs(t, c)[0]
	if g0.Healthy || !strings.Contains(g0.Error, "queries fail: memory info: Unknown Error") || g0.TotalMiB != 4096 {
		t.Errorf("GPU 0 failing its queries: %+v", g0)
	}
	_, err = c.Run(ctxT(t), api.RunParams{Name: "r", Dir: "/", GPU: &api.GPURef{Index: 0}, Cmd: []string{"true"}})
	wantCode(t, err, api.CodeUnavailable)
	h.setGPUFaults(simgpu.Faults{Missing: []string{uuid1}})
	h.refresh()

	// A restarted daemon still knows GPU 1 and reports it missing.
	h.stop()
	h.begin()
	c = h.client()
	checkMissing()
	h.waitReason("both", "is missing")

	// GPU 1 is back: the job starts, f thaws, run on GPU 1 works.
	h.setGPUFaults(simgpu.Faults{})
	h.refresh()
	h.waitRunning("both")
	for _, g := range mustGPUs(t, c) {
		if !g.Healthy || g.Error != "" {
			t.Errorf("GPU %d once back: %+v", g.Index, g)
		}
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "f"}); err != nil {
		t.Fatalf("thaw once GPU 1 is back: %v", err)
	}
	if _, err := c.Run(ctxT(t), api.RunParams{Name: "r", Dir: "/", GPU: &api.GPURef{Index: 1}, Cmd: []string{"true"}}); err != nil {
		t.Fatalf("run on GPU 1 once back: %v", err)
	}
}
