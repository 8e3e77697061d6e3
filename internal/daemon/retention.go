package daemon

import (
	"context"
	"maps"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/retention"
	"github.com/gpusched/gpusched/pkg/api"
)

// retentionMaxWait bounds the wait between two retention passes, so that
// records come due even when the wall clock steps.
const retentionMaxWait = time.Hour

// runRetention forgets finished history past --keep-finished,
// --keep-finished-for and --keep-finished-log-bytes, each user's counted
// apart, and past --keep-finished-log-fraction, all users' together, until
// ctx ends: at start,
// after every kick (a process exited, a job finished) and when the next
// record comes due for its age.
func (d *Daemon) runRetention(ctx context.Context) {
	l := d.cfg.Limits
	p := retention.Policy{Keep: l.KeepFinished, For: l.KeepFinishedFor, Bytes: int64(l.KeepFinishedLogMiB) << 20}
	if p.Off() && l.KeepFinishedLogFraction == 0 {
		return
	}
	sizes := logSizes{}
	together := func() int64 { return 0 }
	if l.KeepFinishedLogFraction > 0 {
		together = d.logDirShare(l.KeepFinishedLogFraction, "--keep-finished-log-fraction")
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.retain:
		case <-t.C:
		}
		now := time.Now()
		p.Together = together()
		next := earliest(d.retainProcs(ctx, p, sizes, now), d.retainJobs(p, now))
		wait := retentionMaxWait
		if !next.IsZero() {
			wait = min(wait, next.Sub(now))
		}
		t.Reset(wait)
	}
}

// kickRetention asks for a retention pass; kicks while one is due
// coalesce.
func (d *Daemon) kickRetention() {
	select {
	case d.retain <- struct{}{}:
	default:
	}
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// logSizes remembers what each exited process's logs hold (record id to
// bytes): they no longer grow, so a pass reads the sizes of the processes
// that exited since the last one only, not of every one kept.
type logSizes map[string]int64

// retainProcs forgets the exited processes p says to drop at now, and
// returns when the next comes due.
func (d *Daemon) retainProcs(ctx context.Context, p retention.Policy, sizes logSizes, now time.Time) time.Time {
	recs := d.finishedProcs()
	items := make([]retention.Item, len(recs))
	seen := make(map[string]bool, len(recs))
	for i, r := range recs {
		ended := r.ExitedAt
		if ended.IsZero() {
			ended = r.CreatedAt
		}
		items[i] = retention.Item{UID: r.Owner.UID, Ended: ended}
		if p.Bytes > 0 || p.Together > 0 {
			n, ok := sizes[r.ID]
			if !ok {
				n = logfile.Bytes(r.LogPath, d.cfg.LogKeep)
				sizes[r.ID] = n
			}
			items[i].Bytes, seen[r.ID] = n, true
		}
	}
	maps.DeleteFunc(sizes, func(id string, _ int64) bool { return !seen[id] })
	drop, next := retention.Select(now, p, items)
	if len(drop) == 0 {
		return next
	}
	want := make(map[proctable.Key]string, len(drop))
	keys := make([]proctable.Key, len(drop))
	for i, k := range drop {
		want[recs[k].Key()], keys[i] = recs[k].ID, recs[k].Key()
	}
	removed, _ := d.forget(ctx, keys, api.RemovedByRetention, func(r proctable.Record) error {
		if r.ID != want[r.Key()] || r.Live() {
			return errReplaced
		}
		return nil
	})
	for _, r := range removed {
		d.log.Info("removed an exited process by retention", zap.String("name", r.Name), zap.String("id", r.ID),
			zap.String("user", r.Owner.User), zap.Time("exited_at", r.ExitedAt))
	}
	return next
}

// finishedProcs lists the exited processes, less those of job attempts
// not yet settled: their jobs read the record to settle.
func (d *Daemon) finishedProcs() []proctable.Record {
	pending := map[string]bool{}
	for _, j := range d.jobs.View() {
		if j.Active() && j.Proc != "" {
			pending[j.Proc] = true
		}
	}
	var out []proctable.Record
	for _, r := range d.table.View().Records {
		if !r.Live() && !pending[r.ID] {
			out = append(out, *r)
		}
	}
	return out
}

// retainJobs forgets the finished jobs p says to drop at now, and returns
// when the next comes due.
func (d *Daemon) retainJobs(p retention.Policy, now time.Time) time.Time {
	var jobs []*jobqueue.Job
	var items []retention.Item
	for _, j := range d.jobs.View() { // in submission order: of equal ends, the later is newer
		if !j.State.Terminal() {
			continue
		}
		ended := j.EndedAt
		if ended.IsZero() {
			ended = j.SubmittedAt
		}
		jobs = append(jobs, j)
		items = append(items, retention.Item{UID: j.Owner.UID, Ended: ended})
	}
	drop, next := retention.Select(now, p, items)
	if len(drop) == 0 {
		return next
	}
	ids := make([]string, len(drop))
	for i, k := range drop {
		ids[i] = jobs[k].ID
	}
	for _, j := range d.forgetJobs(ids, api.RemovedByRetention, nil) {
		d.log.Info("removed a finished job by retention", zap.String("job", j.Name), zap.String("id", j.ID),
			zap.String("user", j.Owner.User), zap.Time("ended_at", j.EndedAt))
	}
	return next
}
