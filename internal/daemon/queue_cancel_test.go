package daemon

import (
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestJobCancelWhileStarting cancels a job exactly while its attempt is
// starting. The attempt waits for its name's operation lock, which the
// test holds, so the job is `starting` with no process; the cancel is
// recorded, then the lock is released and the attempt is abandoned.
//
// Then the two ways the abandoned attempt used to be launched again, which
// lost the cancel (the job ran to the end with cancel timed out), are
// replayed deterministically: a reconcile pass that read the queue while
// the job was starting and settles it after the attempt was abandoned,
// and a daemon restart from a record left `starting` with its cancel
// recorded (what kill -9 leaves between the two).
//
// Each time: the job is cancelled with its one attempt, whose outcome is
// cancelled and which has no exit; the job names no process (none ever
// existed); a full placement pass later it is still cancelled, with no
// process record and no process; job_wait ends with it; rm finds nothing.
func TestJobCancelWhileStarting(t *testing.T) {
	h := newQueueHarness(t, "1x24G")
	const name = "cw"
	unlock, err := h.d.ops.lock(ctxT(t), proctable.Key{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			unlock()
		}
	}()
	h.submit(api.JobSpec{Name: name, Cmd: h.simjob("--vram", "1024"), VRAM: gib(1)})
	h.waitJobState(name, api.JobStarting)
	stale, _ := h.d.jobs.Owned(0, name) // as a reconcile pass reads it now

	type answer struct {
		j   *api.Job
		err error
	}
	cancelled := make(chan answer, 1)
	go func() {
		j, err := h.client().Cancel(ctxT(t), name)
		cancelled <- answer{j, err}
	}()
	waitFor(t, func() bool { j, _ := h.d.jobs.Owned(0, name); return j.Ending == api.JobCancelled })
	unlock()
	locked = false
	got := <-cancelled
	if got.err != nil {
		t.Fatalf("cancel while starting: %v", got.err)
	}
	checkCancelledBeforeStart(t, "cancel's answer", got.j)
	waitFor(t, func() bool { return !h.d.sched.busy(h.d.sched.launching, stale.ID) })

	h.d.reconcileJob(stale)
	checkStaysCancelled(t, h, name, "after a reconcile of the job as read while starting")

	// A restart from the job recorded `starting` with its cancel recorded
	// and no process record.
	h.stop()
	st, err := store.OpenRecords(filepath.Join(h.cfg.StateDir, "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(st, nil)
	if _, err := q.Load(); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Update(stale.ID, func(cur *jobqueue.Job) error {
		*cur = *stale
		cur.Ending, cur.Reason = api.JobCancelled, "cancelled by root"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.start()
	checkStaysCancelled(t, h, name, "after a restart with its cancel recorded while starting")
}

// checkCancelledBeforeStart checks a job cancelled before its one attempt
// started.
func checkCancelledBeforeStart(t *testing.T, what string, j *api.Job) {
	t.Helper()
	if j.State != api.JobCancelled || len(j.Attempts) != 1 {
		t.Fatalf("%s: %s (%s), %d attempts; want cancelled with its one attempt", what, j.State, j.Reason, len(j.Attempts))
	}
	if a := j.Attempts[0]; a.Outcome != "cancelled" || a.Exit != nil || a.EndedAt.IsZero() || j.Exit != nil {
		t.Fatalf("%s: attempt %+v, exit %+v; want cancelled, ended, no exit", what, a, j.Exit)
	}
	if j.Process != "" {
		t.Fatalf("%s: names process %q, which never existed", what, j.Process)
	}
}

// checkStaysCancelled checks, after a full placement pass, that a job
// cancelled before it started is still cancelled and was not launched
// again, that job_wait ends with it and that it left no process.
func checkStaysCancelled(t *testing.T, h *ckptHarness, name, when string) {
	t.Helper()
	for range 2 { // a pass that began after this point has ended
		n := h.d.sched.passes.Load()
		h.d.sched.kick()
		waitFor(t, func() bool { return h.d.sched.passes.Load() > n })
	}
	checkCancelledBeforeStart(t, "job "+when, h.job(name))
	checkCancelledBeforeStart(t, "job_wait "+when, h.waitJob(name))
	if r, ok := h.record(name); ok {
		t.Fatalf("%s: process record %+v for a job cancelled before it started", when, r)
	}
	if pids := processesNamed(t, name); len(pids) != 0 {
		t.Fatalf("%s: processes %v run as %q", when, pids, name)
	}
	_, err := h.client().Rm(ctxT(t), name)
	wantCode(t, err, api.CodeNotFound)
}
