package daemon

import (
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestJobStartHeldToTheOwnersShare: starting a queued job's process is
// charged to its owner's share of the daemon's CPU, as run is: a job placed
// while its owner is over the share waits, starting, until they are back
// within it, and then runs. Job starts were the daemon's own work: 300
// jobs of `true` from one user kept 0.58 of a CPU of the daemon busy.
func TestJobStartHeldToTheOwnersShare(t *testing.T) {
	budget := &holdingBudget{uid: 0, let: make(chan struct{})}
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.Sim = "1x4G" })
	h.opts = append(h.opts, func(d *Daemon) { d.bulk = bulkgate.New(1).Metered(budget) })
	h.begin()
	h.submit(api.JobSpec{Name: "holder", Cmd: h.simjob("--vram", "3000"), VRAM: api.VRAM{MiB: 3000}})
	h.waitJobState("holder", api.JobRunning)
	h.submit(api.JobSpec{Name: "next", Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 3000}})

	budget.hold()
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "holder"}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); budget.waiters() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the next job was started over its owner's share: %s", jobState(t, h, "next"))
		}
	}
	if s := jobState(t, h, "next"); s != api.JobStarting {
		t.Fatalf("the next job is %s while its start waits for its owner's share, want starting", s)
	}
	close(budget.let)
	h.waitJobState("next", api.JobDone)
}

// jobState is name's state now.
func jobState(t *testing.T, h *ckptHarness, name string) api.JobState {
	t.Helper()
	j, err := h.client().Job(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}
