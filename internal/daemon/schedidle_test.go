package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// samples waits for n more GPU samples (each a new view).
func (h *ckptHarness) samples(n int) {
	h.t.Helper()
	for range n {
		v := h.d.gpuView()
		waitFor(h.t.(*testing.T), func() bool { return h.d.gpuView() != v })
	}
}

// TestSchedulerIdleDoesNotPlace: with jobs queued that cannot start and
// nothing changing, GPU samples (every 50 ms here) run no placement pass;
// a change (a new job) still runs one, which explains the new job's wait.
func TestSchedulerIdleDoesNotPlace(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	h.submit(api.JobSpec{Name: "hold", Cmd: h.simjob("--vram", "20480"), VRAM: api.VRAM{MiB: 20480}})
	h.waitRunning("hold")
	for _, n := range []string{"q1", "q2", "q3"} {
		h.submit(api.JobSpec{Name: n, Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 8192}})
	}
	h.samples(3) // the passes these changes asked for are done
	before := h.d.sched.passes.Load()
	h.samples(20)
	if n := h.d.sched.passes.Load() - before; n != 0 {
		t.Fatalf("%d placement passes over 20 GPU samples with nothing changed; want none", n)
	}
	h.submit(api.JobSpec{Name: "q4", Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 8192}})
	waitFor(t, func() bool {
		j, ok := h.d.jobs.Owned(0, "q4")
		return ok && h.d.sched.reason(j) != ""
	})
	if j := h.job("q4"); j.State != api.JobQueued {
		t.Fatalf("q4 is %s, want queued behind hold", j.State)
	}
}
