package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// cancelWait bounds how long cancel waits for a running job to end beyond
// the kill grace.
const cancelWait = reapTimeout + 5*time.Second

// cancel cancels a job: a queued one at once, one with an attempt by ending
// its process tree (TERM, then KILL after --job-kill-grace). It answers
// with the job once cancelled.
func (d *Daemon) cancel(c *call) (any, error) {
	var p api.JobParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	j, err := d.lookupJob(c, p.Name)
	if err != nil {
		return nil, err
	}
	sub, stop := d.events.subscribe(func(e *api.Event) bool { return e.Job != nil && e.Job.ID == j.ID })
	defer stop()
	queued, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		switch {
		case cur.State.Terminal():
			return conflictf("job %q is already %s", cur.Name, cur.State)
		case cur.State == api.JobQueued:
			cur.State, cur.Reason, cur.EndedAt = api.JobCancelled, "cancelled while queued by "+c.actor.User, time.Now()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.sched.kick()
	if queued.State == api.JobCancelled {
		return d.wholeJob(c, queued), nil
	}
	d.endJob(queued, api.JobCancelled, "cancelled by "+c.actor.User)
	timeout := time.NewTimer(d.cfg.JobKillGrace + cancelWait)
	defer timeout.Stop()
	for {
		if cur, ok := d.jobs.Get(j.ID); ok && cur.State.Terminal() {
			return d.wholeJob(c, cur), nil
		}
		select {
		case <-sub.ch:
		case <-timeout.C:
			return nil, api.Errorf(api.CodeTimeout, "job %q: cancel asked, but it has not ended yet", j.Name)
		case <-c.ctx.Done():
			return nil, c.ctx.Err()
		}
	}
}

// jobWait streams a job's events until it is finished and answers with the
// finished job.
func (d *Daemon) jobWait(c *call, stream *eventStream) (any, error) {
	var p api.JobWaitParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	j, err := d.lookupJob(c, p.Name)
	if err != nil {
		return nil, err
	}
	sub, stop := d.events.subscribe(func(e *api.Event) bool { return e.Job != nil && e.Job.ID == j.ID })
	defer stop()
	if cur, ok := d.jobs.Get(j.ID); ok && cur.State.Terminal() {
		return d.wholeJob(c, cur), nil
	}
	ctx := c.ctx
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(p.Timeout))
		defer cancel()
	}
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				cur, _ := d.jobs.Get(j.ID)
				return nil, api.Errorf(api.CodeTimeout, "job %q still %s after %s", j.Name, cur.State, time.Duration(p.Timeout))
			}
			return nil, ctx.Err()
		case e, ok := <-sub.ch:
			if !ok {
				return nil, api.Errorf(api.CodeUnavailable, "job_wait %q: event stream closed; wait again", j.Name)
			}
			if err := stream.emit(&e); err != nil {
				return nil, err
			}
			if e.JobState.Terminal() && e.Warning == "" {
				if cur, ok := d.jobs.Get(j.ID); ok {
					return d.wholeJob(c, cur), nil // the command whole, as job has it
				}
				return e.Job, nil
			}
		}
	}
}
