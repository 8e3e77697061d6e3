package daemon

import (
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// criuCgroupName names, in a user's delegated cgroup, the cgroup their
// CRIU operations run in (cgroup.Users makes it gpusched-criu): one for
// all of them, as they run one at a time (criuTurns). Record ids are
// UUIDs, so no tree's cgroup has that name.
const criuCgroupName = "criu"

// criuPlace is where a CRIU worker runs for a user's own operation, and
// where a tree it restores goes back to before it runs.
type criuPlace struct {
	dirs []string // the worker is moved there (cgroup.Move); none: it stays in the daemon's
	home []string // a restored tree, born in dirs, is moved there: the daemon's own
	// cpus are those the worker and its helpers run on, and so a tree it
	// restores: the tree's own (proctable.Record.CPUs); "": every CPU the
	// daemon gives users.
	cpus string
}

// criuPlaceFor is where the CRIU of an operation on rec's tree runs,
// asked for by its owner from a process in cgroups caller (zero: the
// daemon itself asked, or someone else), so that its CPU, memory and
// tasks weigh against what holds the owner, and not against the daemon's
// cgroup, shared by every user. It runs on the tree's CPUs (so that a
// tree it restores is born there). Root's stays in the daemon's cgroups.
// A user with a delegated cgroup (userCgroupOf) has it run in
// gpusched-criu there, where their trees are placed anyway. Otherwise it
// runs in the caller's cgroups apart from the daemon's, as a log reader
// does, and a tree it restores goes back to the daemon's before it runs.
// The daemon's own dumps (evictions, ttl policies) never run in a user's
// cgroups nor on their CPUs: the user may freeze or kill what is in
// cgroups they made, and crowd CPUs they chose, and those must not wait
// on them.
func (d *Daemon) criuPlaceFor(rec proctable.Record, caller logreader.Cgroups) (criuPlace, error) {
	place := criuPlace{cpus: rec.CPUs}
	if rec.Owner.UID == 0 {
		return place, nil
	}
	if dir := d.userCgroupOf(rec.Owner, criuCgroupName); dir != "" {
		if err := d.users.Make(dir); err != nil {
			return criuPlace{}, fmt.Errorf("the cgroup of user %s for CRIU: %w", rec.Owner.User, err)
		}
		place.dirs = []string{dir}
		return place, nil
	}
	self, err := logreader.Of(os.Getpid())
	if err != nil || !caller.Apart(self) {
		return place, nil
	}
	place.dirs, place.home = caller.Except(self), self.Except(caller)
	return place, nil
}

// callerCgroups are the cgroups of the process that sent c, where c is
// owner's own call (not root's), else none.
func callerCgroups(c *call, owner proctable.Owner) logreader.Cgroups {
	if c.actor.UID != owner.UID || owner.UID == 0 {
		return logreader.Cgroups{}
	}
	cg, err := peerCgroups(c.actor)
	if err != nil {
		return logreader.Cgroups{}
	}
	return cg
}

// goHome moves the tree CRIU restored at initPID, not yet running, out of
// the caller's cgroups it was born in, back to the daemon's (p.home).
func (p criuPlace) goHome(initPID int) error {
	if len(p.home) == 0 {
		return nil
	}
	pids, err := procfs.TreeOf(initPID)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := cgroup.Move(pid, p.home...); err != nil {
			return fmt.Errorf("move the restored tree back to the daemon's cgroups: %w", err)
		}
	}
	return nil
}

// frozen names a cgroup of p.dirs while it is frozen (unlessFrozen).
func (p criuPlace) frozen() string {
	for _, dir := range p.dirs {
		if cgroup.Frozen(dir) {
			return dir
		}
	}
	return ""
}
