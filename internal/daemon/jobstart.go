package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/thawqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// schedulePass places what waits and starts what placement says may start,
// then settles the attempts that ended. Placement reads what processes
// hold from the process table, not from the jobs, so an exit frees its
// memory for this very pass; settling (which may queue a retry, and kicks
// the next pass) comes after the starts so as not to delay them. It
// returns how long it took from the bulk gate's grant, which paces the
// next pass (passPace).
func (d *Daemon) schedulePass(ctx context.Context) (took time.Duration) {
	plan, room, granted, resumeThaws, ok := d.plan(ctx)
	defer resumeThaws()
	defer func() {
		d.reconcileJobs()
		if !granted.IsZero() {
			took = time.Since(granted)
		}
	}()
	if !ok {
		return
	}
	if lost := lostWhy(d.gpuView()); lost != "" {
		for i := range plan.Waits {
			plan.Waits[i].Detail += lost
		}
		for uid, w := range room.waiting {
			w.Detail += lost
			room.waiting[uid] = w
		}
	}
	started := startedWaits(plan)
	d.sched.reasons.Store(&waitReasons{waits: plan.Waits, byOwner: room.waiting, reserved: plan.Reserved, started: started})
	d.leases.setReasons(plan.Waits)
	for _, w := range plan.Infeasible {
		d.infeasible(w)
	}
	for _, s := range plan.Starts {
		switch {
		case strings.HasPrefix(s.JobID, thawPrefix):
			d.resumePreempted(ctx, strings.TrimPrefix(s.JobID, thawPrefix))
		case strings.HasPrefix(s.JobID, leasePrefix):
			if user := d.leases.grant(strings.TrimPrefix(s.JobID, leasePrefix), s.GPUs); user != "" {
				d.sched.Serve(user)
			}
		case strings.HasPrefix(s.JobID, waitPrefix):
			// the thaw queue admits it (below)
		default:
			if j, ok := d.jobs.Get(s.JobID); ok && !room.take(j.Owner.UID) {
				continue // its owner reached the cap in this pass: held from the next one
			}
			d.launch(ctx, s)
		}
	}
	resumeThaws() // the starts are recorded: thaws count them
	if len(started) > 0 {
		d.thaws.Sampled() // placement kept room for a waiting thaw: the queue looks again
	}
	return
}

// plan places the queue, the costly part of a pass (its time grows with
// the queue), as bulk work, once the bulk gate granted it a slot (at
// granted; zero when the pass ended first). When the last GPU sample
// failed it records why everything waits instead, and ok is false. No
// thaw is admitted from the snapshot on until resumeThaws (never nil) is
// called, once the plan's starts are recorded: a thaw admitted meanwhile
// could take the memory placement gives a job, and the job's the thaw's.
func (d *Daemon) plan(ctx context.Context) (plan placement.Plan, room *procRoom, granted time.Time, resumeThaws func(), ok bool) {
	resumeThaws = func() {}
	slot, err := d.bulk.Enter(ctx, passUID)
	if err != nil {
		return plan, nil, granted, resumeThaws, false
	}
	defer slot.Leave()
	granted = time.Now()
	var held map[string]uint64
	var waiting []thawqueue.Waiter
	held, waiting, resumeThaws = d.thaws.Pause()
	snap, queue, room := d.placementInput(time.Now(), d.sched.queue, held, waiting)
	d.sched.queue = queue
	if waits, stale := staleWaits(d.gpuView(), queue); stale {
		resumeThaws()
		d.sched.reasons.Store(&waitReasons{waits: waits})
		d.leases.setReasons(waits)
		return plan, nil, granted, resumeThaws, false
	}
	return placement.Place(snap, queue), room, granted, resumeThaws, true
}

// infeasible ends a request that can never fit.
func (d *Daemon) infeasible(w placement.Wait) {
	if strings.HasPrefix(w.JobID, leasePrefix) {
		d.leases.refuse(strings.TrimPrefix(w.JobID, leasePrefix), w.Detail)
		return
	}
	if strings.HasPrefix(w.JobID, thawPrefix) || strings.HasPrefix(w.JobID, waitPrefix) {
		return
	}
	_, err := d.jobs.Update(w.JobID, func(j *jobqueue.Job) error {
		if j.State != api.JobQueued {
			return errReplaced
		}
		j.State, j.Reason, j.EndedAt = api.JobInfeasible, w.Detail, time.Now()
		return nil
	})
	if err != nil && !errors.Is(err, errReplaced) {
		d.log.Error("mark job infeasible", zap.String("job", w.JobID), zap.Error(err))
	}
}

// launch records a new attempt of a queued job on the GPUs placement chose
// (so the next pass counts it) and starts it in the background, after
// freezing the processes placement preempts for it.
func (d *Daemon) launch(ctx context.Context, s placement.Start) {
	if !d.sched.setBusy(d.sched.launching, s.JobID) {
		return
	}
	var since time.Time // when it began to wait, for the queue wait metric
	j, err := d.jobs.Update(s.JobID, func(j *jobqueue.Job) error {
		if j.State != api.JobQueued {
			return errReplaced
		}
		since = queuedSince(j)
		j.State, j.Reason, j.Proc, j.Ending = api.JobStarting, "", uuid.NewString(), ""
		j.Attempts = append(j.Attempts, api.Attempt{N: len(j.Attempts) + 1, GPUs: s.GPUs, VRAMMiB: j.VRAMMiB,
			StartedAt: time.Now(), PeakMiB: map[string]uint64{}})
		return nil
	})
	if err != nil {
		d.sched.clearBusy(d.sched.launching, s.JobID)
		if !errors.Is(err, errReplaced) {
			d.log.Error("start job attempt", zap.String("job", s.JobID), zap.Error(err))
		}
		return
	}
	d.metrics.queueWaited(since, j.Current().StartedAt)
	d.sched.Serve(j.Owner.User)
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer d.sched.kick()
		defer d.sched.clearBusy(d.sched.launching, j.ID)
		d.runAttempt(ctx, j, s.Preempt)
	}()
}

// runAttempt preempts, then spawns the attempt's process. A failure that
// is the machine's (a preemption that did not free the memory) puts the
// job back in the queue; one that is the job's (its command cannot start)
// fails it.
func (d *Daemon) runAttempt(ctx context.Context, j *jobqueue.Job, preempt []string) {
	log := d.log.With(zap.String("job", j.Name), zap.String("id", j.ID), zap.Int("attempt", j.Current().N))
	key := jobProcKey(j)
	for _, name := range preempt {
		if err := d.preempt(ctx, name, j); err != nil {
			log.Warn("preemption failed; job requeued", zap.String("victim", name), zap.Error(err))
			d.requeue(j, fmt.Sprintf("preempting %q failed: %v", name, err))
			return
		}
	}
	rec := proctable.Record{
		ID: j.Proc, Name: j.Name, Owner: proctable.Owner(j.Owner), Cmd: j.Cmd, Dir: j.Dir, GPUs: j.Current().GPUs,
		Policy: api.Policy{Priority: evictionPriority(j)}, Job: j.ID,
		State: api.StateStarting, BootID: d.bootID, CreatedAt: time.Now(),
		LogPath:    d.logPath(key),
		StatusPath: filepath.Join(d.statusDir(), j.Proc),
	}
	// Starting the process is charged to its owner's share of the daemon's
	// CPU, as run is, and an owner over it waits here first: 300 jobs of
	// `true` from one user kept 0.58 of a CPU of the daemon busy, held to
	// no share.
	charge, err := d.bulk.Meter(ctx, j.Owner.UID)
	if err != nil {
		return // the daemon is stopping: the next one settles the attempt
	}
	defer charge()
	// The job is recorded as starting: fillers on its GPUs hand its
	// declaration over before its process runs.
	d.syncFillers(ctx, rec.GPUs)
	rec.Nice, rec.MPSThreads, rec.MPSMemLimitMiB, rec.Rlimits, rec.CPUs, rec.OOMScoreAdj = j.Nice, j.MPSThreads, j.MPSLimitMiB(), j.Rlimits, j.CPUs, j.OOMScoreAdj
	env, err := d.environ(api.RunParams{Name: j.Name, Env: j.Env, Nice: rec.Nice, MPSThreads: rec.MPSThreads,
		MPSMemLimit: api.VRAM{MiB: rec.MPSMemLimitMiB}}, j.Proc, rec.GPUs)
	if err == nil {
		env = append(env, "GPUSCHED_JOB="+j.ID)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		var unlock func()
		if unlock, err = d.ops.lock(sctx, key); err == nil {
			if cur, ok := d.jobs.Get(j.ID); ok && cur.Ending == api.JobCancelled {
				err = errCancelled
			} else {
				_, err = d.startProc(sctx, rec, env, j.Current().N > 1, nil)
			}
			unlock()
		}
		cancel()
	}
	if err != nil {
		log.Warn("job attempt did not start", zap.Error(err))
		d.attemptNotStarted(j, err)
		return
	}
	if _, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || cur.State != api.JobStarting {
			return errReplaced
		}
		cur.State = api.JobRunning
		return nil
	}); err != nil && !errors.Is(err, errReplaced) {
		log.Error("record job running", zap.Error(err))
	}
	d.armTimeout(j.ID)
	log.Info("job started", zap.Strings("gpus", rec.GPUs), zap.Uint64("vram_mib", j.VRAMMiB))
}

var errCancelled = errors.New("cancelled before it started")

// attemptNotStarted ends an attempt whose process never ran: cancelled, or
// failed without using a retry.
func (d *Daemon) attemptNotStarted(j *jobqueue.Job, cause error) {
	_, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || cur.State != api.JobStarting {
			return errReplaced
		}
		endNotStarted(cur, cause)
		return nil
	})
	if err != nil && !errors.Is(err, errReplaced) {
		d.log.Error("record job start failure", zap.String("job", j.ID), zap.Error(err))
	}
}

// endNotStarted ends cur's starting attempt, whose process never ran,
// because of cause.
func endNotStarted(cur *jobqueue.Job, cause error) {
	a := cur.Current()
	a.EndedAt = time.Now()
	cur.EndedAt = a.EndedAt
	if errors.Is(cause, errCancelled) {
		a.Outcome, cur.State, cur.Reason = "cancelled", api.JobCancelled, "cancelled before it started"
		return
	}
	a.Outcome, cur.State, cur.Reason = "failed", api.JobFailed, "could not start: "+cause.Error()
}

// requeue puts a job whose attempt never ran back in line, forgetting the
// attempt. Only a starting attempt goes back: j may be stale (a
// reconcile pass read it before the attempt settled), and an attempt
// that already ended must stay ended. One whose cancel was recorded
// (before a restart, or while it preempted) ends cancelled instead, since
// launching it again would lose the cancel.
func (d *Daemon) requeue(j *jobqueue.Job, why string) {
	_, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		switch {
		case cur.Proc != j.Proc || cur.State != api.JobStarting:
			return errReplaced
		case cur.Ending == api.JobCancelled:
			endNotStarted(cur, errCancelled)
			return nil
		}
		cur.Attempts = cur.Attempts[:len(cur.Attempts)-1]
		cur.State, cur.Reason, cur.Proc = api.JobQueued, why, ""
		return nil
	})
	if err != nil && !errors.Is(err, errReplaced) {
		d.log.Error("requeue job", zap.String("job", j.ID), zap.Error(err))
	}
}

// preempt freezes a preemptible job's process to make room for j; it is
// thawed back by placement once its memory fits again.
func (d *Daemon) preempt(ctx context.Context, victim string, j *jobqueue.Job) error {
	if err := d.needDriver(); err != nil {
		return err
	}
	key, _ := proctable.ParseKey(victim)
	name := key.Name
	unlock, err := d.ops.lock(ctx, key)
	if err != nil {
		return err
	}
	defer unlock()
	rec, ok := d.table.Get(key)
	if !ok || rec.State != api.StateRunning || rec.Job == "" {
		return fmt.Errorf("process %q is no longer a running job", name)
	}
	note := fmt.Sprintf("preempted by job %q (%s, priority %d)", j.Name, j.ID, j.Priority)
	_, err = d.freezeLocked(ctx, rec, freezeOpts{lockTimeout: d.cfg.LockTimeout, stop: true, preemptedBy: j.ID, note: note})
	if err != nil {
		return err
	}
	d.log.Info("preempted", zap.String("victim", name), zap.String("for_job", j.Name))
	return nil
}

// resumePreempted thaws a preempted process back, in the background; id
// is its key's String.
func (d *Daemon) resumePreempted(ctx context.Context, id string) {
	key, _ := proctable.ParseKey(id)
	name := key.Name
	if !d.sched.setBusy(d.sched.resuming, id) {
		return
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer d.sched.kick()
		defer d.sched.clearBusy(d.sched.resuming, id)
		unlock, err := d.ops.lock(ctx, key)
		if err != nil {
			return
		}
		defer unlock()
		rec, ok := d.table.Get(key)
		if !ok || rec.PreemptedBy == "" || onGPU(rec.State) || !rec.Live() {
			return
		}
		_, err = d.thawLocked(ctx, rec, thawOpts{op: "thaw", wait: resumeWait, waitCtx: ctx})
		if err != nil {
			d.log.Warn("thaw of a preempted process failed; placement will retry", zap.String("name", name), zap.Error(err))
			return
		}
		d.table.Update(key, func(r *proctable.Record) error {
			r.PreemptedBy, r.Note = "", "thawed back after preemption"
			return nil
		})
		d.log.Info("resumed after preemption", zap.String("name", name))
	}()
}

// resumeWait bounds how long a placed thaw waits for a GPU sample to show
// the memory placement already counted as free.
const resumeWait = 10 * time.Second

// evictionPriority is the disk-tier priority of a job's process: its job
// priority, except that only root's jobs get one above 0, as with set.
func evictionPriority(j *jobqueue.Job) int {
	if j.Owner.UID != 0 {
		return min(j.Priority, 0)
	}
	return j.Priority
}
