package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/jobqueue"
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

// atJobCap refuses a submit by a user who already has every unfinished job
// the cap allows, before the request's params are decoded.
func (d *Daemon) atJobCap(a actor) error {
	limit := d.cfg.Limits.JobsPerUser
	if a.root() || limit <= 0 {
		return nil
	}
	return limits.Check(a.UID, a.User, d.unfinishedJobs(a.UID), limit, flagJobs, jobsWhat)
}

// unfinishedJobs counts uid's unfinished jobs, from the queue's counts:
// a user at the cap who submits in a loop costs no walk of the queue.
func (d *Daemon) unfinishedJobs(uid uint32) int {
	n := 0
	for s, k := range d.jobs.States()[uid] {
		if !s.Terminal() {
			n += k
		}
	}
	return n
}

// --max-job-bytes-per-user: what one non-root user's unfinished jobs keep
// of commands and environments in the daemon (each job may have 256 KiB:
// 10,000 of them would be 2.5 GiB). Checked before the queue adds, so
// submissions in flight at once may go past it by their own size.
const flagJobBytes = "max-job-bytes-per-user"

// checkJobBytes refuses a's submission of jobs when the user's unfinished
// jobs and these would keep more than the cap of command and environment.
func (d *Daemon) checkJobBytes(a actor, jobs []*jobqueue.Job) error {
	limit := d.cfg.Limits.JobMiBPerUser << 20
	if a.root() || limit == 0 {
		return nil
	}
	var have, adding uint64
	for _, j := range d.jobs.View() {
		if j.Owner.UID == a.UID && !j.State.Terminal() {
			have += j.Bytes()
		}
	}
	for _, j := range jobs {
		adding += j.Bytes()
	}
	if have+adding <= limit {
		return nil
	}
	return &limits.Exceeded{Flag: flagJobBytes, Msg: fmt.Sprintf("user %s has unfinished jobs keeping %d KiB of commands and environments; %d KiB more would go past the %d MiB --%s allows: nothing queued",
		a.User, have>>10, adding>>10, limit>>20, flagJobBytes)}
}
