package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// openJobs loads the persisted queue and the learned declarations.
func (d *Daemon) openJobs() error {
	st, err := store.OpenRecords(filepath.Join(d.cfg.StateDir, "jobs"))
	if err != nil {
		return err
	}
	d.jobs = jobqueue.New(st, d.onJobChange)
	problems, err := d.jobs.Load()
	if err != nil {
		return fmt.Errorf("load jobs: %w", err)
	}
	for _, p := range problems {
		d.log.Warn("quarantined a bad job record", zap.String("key", p.Key), zap.String("moved_to", p.Quarantine), zap.Error(p.Err))
	}
	return d.openLearned(filepath.Join(d.cfg.StateDir, "learned.json"))
}

// openLearned loads the peaks learned for vram=auto. A file that cannot be
// read is moved aside, with a warning, and the daemon starts with nothing
// learned: advice lost never blocks a boot.
func (d *Daemon) openLearned(path string) error {
	l, err := jobqueue.OpenLearned(path)
	if err != nil {
		aside := fmt.Sprintf("%s.bad-%d", path, time.Now().UnixNano())
		if rerr := os.Rename(path, aside); rerr != nil {
			return fmt.Errorf("%w (and cannot move it aside: %v)", err, rerr)
		}
		d.log.Warn("moved aside an unreadable file of learned declarations; vram=auto starts with nothing learned",
			zap.String("moved_to", aside), zap.Error(err))
		if l, err = jobqueue.OpenLearned(path); err != nil {
			return err
		}
	}
	d.learned = l
	return nil
}

// learnedPeriod is how often at most the peaks learned for vram=auto are
// written: a stream of jobs costs the disk one write a period. A crash
// loses at most the last period's; a clean stop loses none.
const learnedPeriod = time.Second

// keepLearned writes what vram=auto learned, at most once per
// learnedPeriod, until ctx ends.
func (d *Daemon) keepLearned(ctx context.Context) {
	d.learned.Keep(ctx, learnedPeriod, func(err error) { d.log.Warn("remember peak VRAM", zap.Error(err)) })
}

// flushLearned writes what vram=auto learned since the last write.
func (d *Daemon) flushLearned() {
	if err := d.learned.Flush(); err != nil {
		d.log.Warn("remember peak VRAM", zap.Error(err))
	}
}

// onJobChange publishes a job's state changes; it runs under the queue
// lock and must not block.
func (d *Daemon) onJobChange(c jobqueue.Change) {
	if c.New == nil {
		j := jobEvent(c.Old)
		d.events.publish(api.Event{Type: api.EventJobRemoved, Time: time.Now(), Name: j.Name, JobState: j.State, Job: &j, Reason: c.Why})
		return
	}
	if c.Old != nil && c.Old.State == c.New.State {
		return
	}
	if c.New.State.Terminal() {
		d.kickRetention()
	}
	j := jobEvent(c.New)
	e := api.Event{Type: api.EventJob, Time: time.Now(), Name: j.Name, JobState: j.State, Job: &j}
	if c.Old != nil {
		e.PrevState = api.State(c.Old.State)
	}
	d.events.publish(e)
	d.sched.kick()
}

// jobEvent renders a job for an event, from its record alone.
func jobEvent(j *jobqueue.Job) api.Job {
	out := api.Job{
		ID: j.ID, Name: j.Name, State: j.State, Reason: j.Reason, User: j.Owner.User, UID: j.Owner.UID,
		Cmd: j.Cmd, CmdTruncated: j.CmdTruncated, Dir: j.Dir, VRAM: j.VRAM, VRAMMiB: j.VRAMMiB, GPUs: j.GPUs, Priority: j.Priority,
		Timeout: api.Duration(j.Timeout), Retries: j.Retries, RetriesLeft: j.RetriesLeft, Preemptible: j.Preemptible,
		SubmittedAt: j.SubmittedAt, EndedAt: j.EndedAt, Attempts: j.Attempts, PeakMiB: j.Peak(), Verdict: j.Verdict,
	}
	if a := j.Current(); a != nil {
		out.StartedAt, out.Exit = a.StartedAt, a.Exit
		// An attempt that ended with no exit left no process record to
		// name: it never ran (cancelled or failed before it started), or
		// its record was removed.
		if a.EndedAt.IsZero() || a.Exit != nil {
			out.Process = j.Name
		}
	}
	out.Nice, out.MPSThreads, out.MPSMemLimit, out.CPUs = j.Nice, j.MPSThreads, j.MPSLimitMiB(), j.CPUs
	return out
}

// onSample runs after every GPU sample: thaws waiting for memory look
// again, running jobs' peaks are updated, and placement runs if the sample
// shows a change.
func (d *Daemon) onSample() {
	d.thaws.Sampled()
	d.observe(d.gpuView())
	d.sched.sampled()
	d.fillers.kick()
}

// observe updates the peak memory of every managed tree and external
// process from one sample, and warns once per attempt when a job goes past
// its declaration (placement budgets it at its peak from then on).
func (d *Daemon) observe(gv *gpuView) {
	active := map[string]*jobqueue.Job{}
	if d.jobs != nil {
		for _, j := range d.jobs.Active() {
			if j.Proc != "" {
				active[j.Proc] = j
			}
		}
	}
	live := map[string]bool{}
	for _, r := range d.table.View().Records {
		if r.Live() {
			live[r.ID] = true
		}
	}
	type warning struct {
		j    *jobqueue.Job
		uuid string
		peak uint64
	}
	var warns []warning
	s := d.sched
	s.mu.Lock()
	for id, per := range gv.usage {
		p := s.peaks[id]
		if p == nil {
			p = map[string]uint64{}
			s.peaks[id] = p
		}
		for uuid, mib := range per {
			p[uuid] = max(p[uuid], mib)
			if j := active[id]; j != nil && j.VRAMMiB > 0 && p[uuid] > j.VRAMMiB && !s.warned[id] {
				s.warned[id] = true
				warns = append(warns, warning{j, uuid, p[uuid]})
			}
		}
	}
	for id := range s.peaks {
		if !live[id] && active[id] == nil {
			delete(s.peaks, id)
		}
	}
	seen := map[int]bool{}
	for _, pu := range gv.procs {
		if gv.owner[pu.PID] != "" {
			continue
		}
		seen[pu.PID] = true
		if s.extPeaks[pu.PID] == nil {
			s.extPeaks[pu.PID] = map[string]uint64{}
		}
		s.extPeaks[pu.PID][pu.UUID] = max(s.extPeaks[pu.PID][pu.UUID], pu.UsedMiB)
	}
	for pid := range s.extPeaks {
		if !seen[pid] {
			delete(s.extPeaks, pid)
		}
	}
	s.mu.Unlock()
	for _, w := range warns {
		d.overDeclared(w.j, w.uuid, w.peak)
	}
}

// overDeclared tells a job's watchers, and the log, that it went past its
// declaration, and records the peak with its attempt.
func (d *Daemon) overDeclared(j *jobqueue.Job, uuid string, peak uint64) {
	msg := fmt.Sprintf("job %q uses %d MiB on GPU %s, past its %d MiB declaration; it is budgeted at its peak plus %.0f%% from now on",
		j.Name, peak, uuid, j.VRAMMiB, d.cfg.SpikeBuffer*100)
	d.log.Warn("job past its VRAM declaration", zap.String("job", j.Name), zap.String("id", j.ID),
		zap.String("gpu", uuid), zap.Uint64("peak_mib", peak), zap.Uint64("declared_mib", j.VRAMMiB))
	cur, err := d.jobs.Update(j.ID, func(cur *jobqueue.Job) error {
		if cur.Proc != j.Proc || !cur.Active() {
			return errReplaced
		}
		a := cur.Current()
		a.PeakMiB[uuid] = max(a.PeakMiB[uuid], peak)
		return nil
	})
	if err != nil {
		cur = j
	}
	ev := jobEvent(cur)
	d.events.publish(api.Event{Type: api.EventJob, Time: time.Now(), Name: j.Name, JobState: cur.State, Job: &ev, Warning: msg})
}
