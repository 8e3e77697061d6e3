package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// queueTurnsHarness is one 4096 MiB simulated GPU, sampled once a second
// as by default: an exit is seen by placement at once, by the GPU sample
// later.
func queueTurnsHarness(t *testing.T) *ckptHarness {
	t.Helper()
	return newCkptHarness(t, config.DriverSim, func(c *config.Config) {
		c.Sim, c.Group, c.ThawMarginMiB, c.GPUPoll = "1x4G", "gsqturn", 100, time.Second
	})
}

// hogTheQueue has hog (a real user) queue twenty jobs of 3000 MiB, 3 s
// each, and returns once one of them runs: room for one at a time.
func (h *ckptHarness) hogTheQueue(t *testing.T, hog testutil.User) {
	t.Helper()
	var lines []string
	for range 20 {
		lines = append(lines, fmt.Sprintf("%s --vram 3000 --hold 3", h.bins.SimJob))
	}
	if _, errOut, code := h.ctlWith(hog, nil, strings.Join(lines, "\n")+"\n", "submit", "--vram", "3000", "--file", "-"); code != 0 {
		t.Fatalf("submit as %s: %s", hog.Name, errOut)
	}
	waitFor(t, func() bool { return len(h.jobsOf(hog, api.JobRunning)) == 1 })
}

// jobsOf lists u's jobs in state.
func (h *ckptHarness) jobsOf(u testutil.User, state api.JobState) []api.Job {
	h.t.Helper()
	jobs, err := h.client().Jobs(ctxT(h.t), api.JobsParams{User: u.Name, All: true})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []api.Job
	for _, j := range jobs {
		if j.State == state {
			out = append(out, j)
		}
	}
	return out
}

// TestRedTeamQueuedJobsTakeTurnsBetweenUsers: a user's long queue does not
// keep another user's job waiting behind all of it. With room for one job
// at a time, every pass used to start the hog's next job (its queued jobs
// came first by submission, each in the first round again once the one
// before it ended), so the other user's job, submitted while the hog's
// first ran, waited for all twenty. Now the user running fewer, then the
// user started least recently, goes first: the other user's job is next.
func TestRedTeamQueuedJobsTakeTurnsBetweenUsers(t *testing.T) {
	hog := testutil.NewUser(t, "gsqturn1", "gsqturn")
	other := testutil.NewUser(t, "gsqturn2", "gsqturn")
	h := queueTurnsHarness(t)
	h.hogTheQueue(t, hog)
	if _, errOut, code := h.ctlAs(other, "submit", "--name", "mine", "--vram", "3000", "--", h.bins.SimJob, "--vram", "3000", "--hold", "1"); code != 0 {
		t.Fatalf("submit as %s: %s", other.Name, errOut)
	}
	h.waitJobState("mine", api.JobRunning)
	if started := 20 - len(h.jobsOf(hog, api.JobQueued)); started != 1 {
		t.Fatalf("%d of the hog's jobs started before the other user's one; want 1 (the one running when it was submitted)", started)
	}
}

// TestRedTeamQueuedJobsLeaveAWaitingThawItsTurn: a thaw waiting for GPU
// memory takes its turn among the queued jobs. The hog's next job used to
// take the memory of the one that ended before a GPU sample showed it free
// (placement counts an exit at once), pass after pass: another user's
// waiting thaw timed out behind the whole queue. Now it is in placement's
// queue, in the same round-robin, and goes through once the job running
// when it began to wait ends.
func TestRedTeamQueuedJobsLeaveAWaitingThawItsTurn(t *testing.T) {
	hog := testutil.NewUser(t, "gsqturn3", "gsqturn")
	other := testutil.NewUser(t, "gsqturn4", "gsqturn")
	h := queueTurnsHarness(t)
	h.simJobAs(other, "model", 1500, 1)
	if _, errOut, code := h.ctlAs(other, "freeze", "model"); code != 0 {
		t.Fatalf("freeze: %s", errOut)
	}
	h.hogTheQueue(t, hog)
	if _, errOut, code := h.ctlAs(other, "thaw", "model", "--timeout", "20s"); code != 0 {
		t.Fatalf("the waiting thaw: %s", errOut)
	}
	if started := 20 - len(h.jobsOf(hog, api.JobQueued)); started != 1 {
		t.Fatalf("%d of the hog's jobs started before the other user's waiting thaw went through; want 1 (the one running when it began to wait)", started)
	}
}
