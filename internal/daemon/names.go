package daemon

import (
	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// claimName checks that a new process owned by uid may take name: no
// live process holds it, and an exited one that does is uid's own (start
// then replaces that record and its logs). Another user's record, live or
// exited, is never replaced, whoever asks: its owner or root must rm it
// first. Callers hold name's op lock, under which no other record of that
// name can appear.
func (d *Daemon) claimName(name string, uid uint32) error {
	old, ok := d.table.Get(name)
	switch {
	case !ok:
		return nil
	case old.Owner.UID != uid:
		return heldByOther(name, "process")
	case old.Live():
		return api.Errorf(api.CodeExists, "process %q is already %s (pid %d); kill it or choose another name", name, old.State, old.PID)
	}
	return nil
}

// checkJobName checks, at submit, that a new job owned by uid may use
// name: no unfinished job of another user holds it, nor another user's
// process (see claimName). A name in use by the same user is left to the
// queue (an unfinished job) and to launch (a live process).
func (d *Daemon) checkJobName(name string, uid uint32) error {
	if j, ok := d.jobs.Get(name); ok && j.Name == name && !j.State.Terminal() && j.Owner.UID != uid {
		return heldByOther(name, "job")
	}
	if r, ok := d.table.Get(name); ok && r.Owner.UID != uid {
		return heldByOther(name, "process")
	}
	return nil
}

// heldByOther refuses a name that another user's process or job holds.
func heldByOther(name, what string) error {
	return deniedf("name %q is held by another user's %s; choose another name", name, what)
}

// ownJob finds the newest job named name that a may act on: names of
// finished jobs may be reused by another user, and the newest of a name
// is then not the caller's.
func (d *Daemon) ownJob(a actor, name string) (*jobqueue.Job, bool) {
	v := d.jobs.View()
	for i := len(v) - 1; i >= 0; i-- {
		if v[i].Name == name && a.owns(v[i].Owner.UID) {
			return v[i], true
		}
	}
	return nil, false
}
