package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// reconcileJobs brings every job with a current attempt in line with its
// process: running, preempted, or ended (settled into done, failed,
// timed_out, cancelled, or queued again for an out-of-memory retry). It is
// level-triggered, so it also settles what happened while the daemon was
// down.
func (d *Daemon) reconcileJobs() {
	for _, j := range d.jobs.Active() {
		d.reconcileJob(j)
	}
}

// reconcileJob settles one job as reconcileJobs read it. j may be stale by
// now (its attempt may have settled since the view was read), so every
// change it makes is checked against the job's current record.
func (d *Daemon) reconcileJob(j *jobqueue.Job) {
	if !j.Active() || d.sched.busy(d.sched.launching, j.ID) {
		return
	}
	rec, ok := d.table.Get(jobProcKey(j))
	if !ok || rec.ID != j.Proc {
		if j.State == api.JobStarting {
			d.requeue(j, "its attempt never started (daemon restart)")
		} else {
			d.finishAttempt(j, nil)
		}
		return
	}
	if rec.PreemptedBy != "" && onGPU(rec.State) && rec.State == api.StateRunning {
		d.table.Update(rec.Key(), func(r *proctable.Record) error { r.PreemptedBy = ""; return nil })
	}
	switch {
	case !rec.Live():
		d.finishAttempt(j, &rec)
	case rec.State == api.StateStarting:
	case !onGPU(rec.State) && rec.PreemptedBy != "" && j.State != api.JobPreempted:
		d.stopTimer(j.ID)
		d.setJobState(j, api.JobPreempted, func(cur *jobqueue.Job) {
			cur.Current().Preempted++
			cur.PreemptedAt = time.Now()
		})
	case j.State == api.JobPreempted && rec.State == api.StateThawing:
		// Being thawed back: preempted until its process runs, when its
		// preempted_by is cleared above, in the same pass.
	case onGPU(rec.State) && j.State != api.JobRunning:
		d.setJobState(j, api.JobRunning, func(cur *jobqueue.Job) {
			if !cur.PreemptedAt.IsZero() {
				cur.Current().PreemptedFor += api.Duration(time.Since(cur.PreemptedAt))
				cur.PreemptedAt = time.Time{}
			}
		})
		d.armTimeout(j.ID)
	}
}

// setJobState moves a job with a current attempt to state, applying fn.
func (d *Daemon) setJobState(j *jobqueue.Job, state api.JobState, fn func(*jobqueue.Job)) {
	_, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || !cur.Active() {
			return errReplaced
		}
		cur.State = state
		if fn != nil {
			fn(cur)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errReplaced) {
		d.log.Error("update job", zap.String("job", j.ID), zap.Error(err))
	}
}

// finishAttempt settles an attempt whose process ended (rec nil: its record
// is gone). An attempt that ran out of memory is retried with a raised
// declaration while retries remain; nothing else uses a retry.
func (d *Daemon) finishAttempt(j *jobqueue.Job, rec *proctable.Record) {
	charge := d.bulk.Charge(j.Owner.UID)
	defer charge()
	d.stopTimer(j.ID)
	d.sched.mu.Lock()
	live := d.sched.peaks[j.Proc]
	delete(d.sched.peaks, j.Proc)
	delete(d.sched.warned, j.Proc)
	d.sched.mu.Unlock()
	oom := false
	if rec != nil && !exitedZero(rec.Exit) && j.Ending == "" {
		var err error
		if oom, err = jobqueue.LogEndsInOOM(rec.LogPath); err != nil {
			d.log.Warn("read job log for out-of-memory errors", zap.String("job", j.Name), zap.Error(err))
		}
	}
	next, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || !cur.Active() {
			return errReplaced
		}
		a := cur.Current()
		a.PeakMiB = mergePeaks(a.PeakMiB, live)
		a.EndedAt, a.OOM = time.Now(), oom
		peak := jobqueue.MaxPeak(a.PeakMiB)
		if rec != nil {
			a.Exit = rec.Exit
			if !rec.ExitedAt.IsZero() {
				a.EndedAt = rec.ExitedAt
			}
		}
		switch {
		case rec == nil:
			a.Outcome, cur.State, cur.Reason = "lost", api.JobFailed, "its process record was removed while it ran"
		case cur.Ending != "":
			a.Outcome, cur.State = string(cur.Ending), cur.Ending
		case exitedZero(rec.Exit):
			a.Outcome, cur.State, cur.Reason = "done", api.JobDone, ""
			if peak > 0 { // learned before anyone can see the job done: a vram=auto submission after it finds the peak
				d.learned.Put(j.Owner.UID, j.Cmd, peak) // j ran: its command is whole
			}
		case oom && cur.RetriesLeft > 0:
			old := cur.VRAMMiB
			cur.VRAMMiB = jobqueue.RaisedDeclaration(old, peak)
			cur.RetriesLeft--
			a.Outcome, cur.State, cur.Proc = "oom", api.JobQueued, ""
			cur.Reason = fmt.Sprintf("attempt %d ran out of GPU memory (peak %d MiB, declared %d MiB); retrying with %d MiB, %s left",
				a.N, peak, old, cur.VRAMMiB, api.Plural(cur.RetriesLeft, "retry", "retries"))
			return nil
		case oom:
			a.Outcome, cur.State, cur.Reason = "oom", api.JobFailed, fmt.Sprintf("ran out of GPU memory (peak %d MiB) with no retries left", peak)
		default:
			a.Outcome, cur.State, cur.Reason = "failed", api.JobFailed, "exited "+exitWords(rec.Exit)
		}
		cur.EndedAt = a.EndedAt
		if peak := jobqueue.MaxPeak(cur.Peak()); peak > 0 || cur.State == api.JobDone || cur.State == api.JobFailed {
			cur.Verdict = jobqueue.Verdict(cur.VRAMMiB, peak)
		}
		return nil
	})
	if err != nil {
		if !errors.Is(err, errReplaced) {
			d.log.Error("settle job attempt", zap.String("job", j.ID), zap.Error(err))
		}
		return
	}
	d.log.Info("job attempt ended", zap.String("job", next.Name), zap.String("id", next.ID),
		zap.String("state", string(next.State)), zap.String("reason", next.Reason), zap.String("verdict", next.Verdict))
}

// exitedZero reports whether e is a clean exit with status 0.
func exitedZero(e *api.Exit) bool { return e != nil && e.Code != nil && *e.Code == 0 }

// exitWords says how a process ended, for reasons.
func exitWords(e *api.Exit) string {
	switch {
	case e == nil || e.Unknown:
		return "unobserved"
	case e.Signal != "":
		return "by " + e.Signal
	}
	return fmt.Sprintf("with code %d", *e.Code)
}

// armTimeout (re)starts the timer that ends a job's current attempt once it
// has run Timeout, not counting time spent preempted.
func (d *Daemon) armTimeout(id string) {
	j, ok := d.jobs.Get(id)
	if !ok || j.Timeout == 0 || j.State != api.JobRunning {
		return
	}
	a := j.Current()
	deadline := a.StartedAt.Add(j.Timeout + time.Duration(a.PreemptedFor))
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	if t := d.sched.timers[id]; t != nil {
		t.Stop()
	}
	d.sched.timers[id] = time.AfterFunc(time.Until(deadline), func() { d.timedOut(j) })
}

func (d *Daemon) stopTimer(id string) {
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	if t := d.sched.timers[id]; t != nil {
		t.Stop()
		delete(d.sched.timers, id)
	}
}

func (d *Daemon) stopJobTimers() {
	d.sched.mu.Lock()
	defer d.sched.mu.Unlock()
	for id, t := range d.sched.timers {
		t.Stop()
		delete(d.sched.timers, id)
	}
}

// timedOut ends an attempt that ran past its timeout: TERM, then KILL after
// --job-kill-grace. A preempted attempt's clock is stopped; its thaw
// re-arms the timer.
func (d *Daemon) timedOut(j *jobqueue.Job) {
	cur, ok := d.jobs.Get(j.ID)
	if !ok || cur.Proc != j.Proc || cur.State != api.JobRunning {
		return
	}
	d.log.Info("job timed out", zap.String("job", j.Name), zap.Duration("timeout", j.Timeout))
	d.endJob(cur, api.JobTimedOut, fmt.Sprintf("ran past its %v timeout", j.Timeout))
}

// endJob asks a job's current attempt to end as ending (cancelled or
// timed_out) and ends its process tree in the background.
func (d *Daemon) endJob(j *jobqueue.Job, ending api.JobState, why string) {
	j, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || !cur.Active() {
			return errReplaced
		}
		cur.Ending, cur.Reason = ending, why
		return nil
	})
	if err != nil {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer d.sched.kick()
		unlock, err := d.ops.lock(context.Background(), jobProcKey(j))
		if err != nil {
			return
		}
		defer unlock()
		rec, ok := d.table.Get(jobProcKey(j))
		switch {
		case !ok || rec.ID != j.Proc || !rec.Live():
		case rec.State == api.StateHibernated:
			_, err = d.killHibernated(rec)
		default:
			_, err = d.endTree(rec, d.cfg.JobKillGrace)
		}
		if err != nil {
			d.log.Warn("end job", zap.String("job", j.Name), zap.Error(err))
		}
	}()
}
