package daemon

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// newQueueHarness runs a daemon on simulated GPUs (sim, e.g. "2x24G") with
// the simulated checkpoint driver, so that preemption can freeze.
func newQueueHarness(t testing.TB, sim string, mods ...func(*config.Config)) *ckptHarness {
	t.Helper()
	return newCkptHarness(t, config.DriverSim, append([]func(*config.Config){func(c *config.Config) {
		c.Sim = sim
		c.JobKillGrace = 2 * time.Second
	}}, mods...)...)
}

// simjob is an argv running gpusched-simjob with args.
func (h *ckptHarness) simjob(args ...string) []string {
	return append([]string{h.bins.SimJob}, args...)
}

// submit queues one job in / with PATH set, failing t on error.
func (h *ckptHarness) submit(s api.JobSpec) api.Job {
	h.t.Helper()
	if s.Dir == "" {
		s.Dir = "/"
	}
	if s.Env == nil {
		s.Env = map[string]string{"PATH": os.Getenv("PATH")}
	}
	jobs, err := h.client().Submit(ctxT(h.t), api.SubmitParams{JobSpec: s})
	if err != nil {
		h.t.Fatalf("submit %s: %v", s.Name, err)
	}
	return jobs[0]
}

// job returns one job, failing t on error.
func (h *harness) job(name string) *api.Job {
	h.t.Helper()
	j, err := h.client().Job(ctxT(h.t), name)
	if err != nil {
		h.t.Fatalf("job %s: %v", name, err)
	}
	return j
}

// waitJob waits until a job is finished and returns it.
func (h *ckptHarness) waitJob(name string) *api.Job {
	h.t.Helper()
	j, err := h.client().WaitJob(ctxT(h.t), api.JobWaitParams{Name: name}, nil)
	if err != nil {
		h.t.Fatalf("job_wait %s: %v", name, err)
	}
	return j
}

// waitJobState follows events until a job is in state.
func (h *harness) waitJobState(name string, state api.JobState) *api.Job {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reached := errors.New("reached")
	var got *api.Job
	err := h.client().Events(ctx, api.EventsParams{Name: name}, func(e *api.Event) error {
		if e.Type == api.EventSubscribed {
			if j, err := h.client().Job(ctx, name); err == nil && j.State == state {
				got = j
				return reached
			}
		}
		if e.Type == api.EventJob && e.JobState == state && e.Warning == "" {
			got = e.Job
			return reached
		}
		return nil
	})
	if !errors.Is(err, reached) {
		h.t.Fatalf("job %s never became %s: %v (now %+v)", name, state, err, h.job(name))
	}
	return got
}

// waitRunning waits until every named job runs and its process has
// allocated its memory (its log says so).
func (h *ckptHarness) waitRunning(names ...string) {
	h.t.Helper()
	for _, n := range names {
		h.waitJobState(n, api.JobRunning)
		h.followCount(n, "simjob: allocated", 1)
	}
	if h.d != nil {
		h.refresh()
	}
}
