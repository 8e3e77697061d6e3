package daemon

import (
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// pruneJobs removes the caller's finished jobs (root: every user's, or
// user's) and lists them, each command cut (listReply). It is bulk work,
// as rm is.
func (d *Daemon) pruneJobs(c *call) (any, error) {
	var p api.PruneJobsParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if err := checkUserFilter(c, p.User, "jobs"); err != nil {
		return nil, err
	}
	var ids []string
	for _, j := range d.jobs.View() {
		if j.State.Terminal() && c.actor.owns(j.Owner.UID) && (p.User == "" || j.Owner.User == p.User) {
			ids = append(ids, j.ID)
		}
	}
	removed := d.forgetJobs(ids, "", func(j *jobqueue.Job) error {
		if !c.actor.owns(j.Owner.UID) {
			return deniedf("job %q belongs to %s", j.Name, j.Owner.User)
		}
		return nil
	})
	return d.listing(c, listField{"jobs", func(yield func(any) bool) { // api.JobsResult
		for _, j := range removed {
			if !yield(listedJob(jobEvent(j))) {
				return
			}
		}
	}}), nil
}

// forgetJobs removes the finished jobs of ids that check (may be nil)
// accepts; why goes with each removal's event. It returns them.
func (d *Daemon) forgetJobs(ids []string, why string, check func(*jobqueue.Job) error) []*jobqueue.Job {
	removed, _, err := d.jobs.RemoveAll(ids, why, func(j *jobqueue.Job) error {
		if !j.State.Terminal() {
			return conflictf("job %q is %s, not finished", j.Name, j.State)
		}
		if check != nil {
			return check(j)
		}
		return nil
	})
	if err != nil {
		d.log.Error("remove finished jobs", zap.Error(err))
	}
	return removed
}
