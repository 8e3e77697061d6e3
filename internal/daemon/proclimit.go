package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// --max-procs-per-user: the managed processes one non-root user may have
// that have not exited. run and fork are refused past it (the process
// table counts and creates atomically, so concurrent calls cannot go
// over); a user's queued jobs wait while the user is at it.
const flagProcs = "max-procs-per-user"

const procsWhat = "managed processes that have not exited"

// admitProc is the admission a's new process passes when the table
// creates it: nil (none) for root.
func (d *Daemon) admitProc(a actor) func(live int) error {
	if a.root() {
		return nil
	}
	return func(live int) error {
		return limits.Check(a.UID, a.User, live, d.cfg.Limits.ProcsPerUser, flagProcs, procsWhat)
	}
}

// atProcCap refuses a run or fork by a user who already has every process
// the cap allows, before the request's params are decoded.
func (d *Daemon) atProcCap(a actor) error {
	if a.root() || d.cfg.Limits.ProcsPerUser <= 0 {
		return nil
	}
	return limits.Check(a.UID, a.User, d.table.View().LiveOf(a.UID), d.cfg.Limits.ProcsPerUser, flagProcs, procsWhat)
}

// checkCopies refuses, before anything is dumped, a fork whose copies
// would take a's live processes past the cap.
func (d *Daemon) checkCopies(a actor, what string, copies int) error {
	max := d.cfg.Limits.ProcsPerUser
	if a.root() || max <= 0 {
		return nil
	}
	if live := d.table.View().LiveOf(a.UID); live+copies > max {
		return &limits.Exceeded{Flag: flagProcs, Msg: fmt.Sprintf("%s: user %s has %d %s; %s would make %d, past the %d --%s allows",
			what, a.User, live, procsWhat, api.Plural(copies, "copy", "copies"), live+copies, max, flagProcs)}
	}
	return nil
}

// reasonUserLimit: a queued job waits because its owner is at a per-user
// cap.
const reasonUserLimit placement.Reason = "user_limit"

// procRoom is, for one placement pass, how many processes each non-root
// owner of queued jobs holds against the cap (max, 0: none), and why the
// jobs of those at it wait.
type procRoom struct {
	max     int
	held    map[uint32]int
	waiting map[uint32]placement.Wait // why each user's queued jobs wait, said once a pass (a queue may hold thousands)
}

// newProcRoom counts each user's live processes and the attempts being
// started that have no live record yet.
func (d *Daemon) newProcRoom(tv *proctable.View, jobs []*jobqueue.Job) *procRoom {
	r := &procRoom{max: d.cfg.Limits.ProcsPerUser, held: map[uint32]int{}, waiting: map[uint32]placement.Wait{}}
	if r.max <= 0 {
		return r
	}
	ids := make(map[string]bool, len(tv.Records))
	for _, rec := range tv.Records {
		if rec.Live() {
			r.held[rec.Owner.UID]++
			ids[rec.ID] = true
		}
	}
	for _, j := range jobs {
		if j.State == api.JobStarting && !ids[j.Proc] {
			r.held[j.Owner.UID]++
		}
	}
	return r
}

// full reports whether uid may start no more processes.
func (r *procRoom) full(uid uint32) bool {
	return r.max > 0 && uid != limits.Root && r.held[uid] >= r.max
}

// hold reports whether j must wait for its owner's processes to end, and
// records why, once for all the owner's jobs.
func (r *procRoom) hold(j *jobqueue.Job) bool {
	if !r.full(j.Owner.UID) {
		return false
	}
	if _, ok := r.waiting[j.Owner.UID]; !ok {
		r.waiting[j.Owner.UID] = placement.Wait{Reason: reasonUserLimit,
			Detail: fmt.Sprintf("user %s has %d %s, the most --%s allows", j.Owner.User, r.held[j.Owner.UID], procsWhat, flagProcs)}
	}
	return true
}

// take counts one start for uid, and reports whether it had room.
func (r *procRoom) take(uid uint32) bool {
	if r.full(uid) {
		return false
	}
	r.held[uid]++
	return true
}
