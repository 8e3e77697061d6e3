package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/limits"
)

// --max-jobs-per-user: the unfinished jobs (queued, starting, running or
// preempted) one non-root user may have. A submission that would go past
// it is refused whole; the queue counts and adds atomically, so that
// concurrent submissions cannot go over.
const flagJobs = "max-jobs-per-user"

const jobsWhat = "unfinished jobs (queued or running)"

// admitJobs is the admission a's submission passes when the queue adds
// it: nil (none) for root.
func (d *Daemon) admitJobs(a actor) func(uid uint32, unfinished, adding int) error {
	limit := d.cfg.Limits.JobsPerUser
	if a.root() || limit <= 0 {
		return nil
	}
	return func(uid uint32, unfinished, adding int) error {
		switch {
		case unfinished+adding <= limit:
			return nil
		case adding == 1:
			return limits.Check(uid, a.User, unfinished, limit, flagJobs, jobsWhat)
		}
		return &limits.Exceeded{Flag: flagJobs, Msg: fmt.Sprintf("user %s has %d %s; %d more would make %d, past the %d --%s allows: nothing queued, it may submit %d more",
			a.User, unfinished, jobsWhat, adding, unfinished+adding, limit, flagJobs, max(limit-unfinished, 0))}
	}
}

// unfinishedJobs counts uid's unfinished jobs in the queue's view.
func (d *Daemon) unfinishedJobs(uid uint32) int {
	n := 0
	for _, j := range d.jobs.View() {
		if j.Owner.UID == uid && !j.State.Terminal() {
			n++
		}
	}
	return n
}
