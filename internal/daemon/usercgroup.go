package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/proctable"
)

// userCgroups puts the trees of a user who has a cgroup of their own (see
// cgroup.Users) in it, under the limits and accounting of that user.
type userCgroups interface {
	Dir(uid uint32, user, id string) string
	Place(dir string, pid, nice int) error
	Make(dir string) error
	Remove(dir string) error
}

// newUserCgroups is nil when --user-cgroups is none.
func newUserCgroups(cfg config.Config) userCgroups {
	if cfg.UserCgroups == config.CgroupNone {
		return nil
	}
	return cgroup.NewUsers(cfg.UserCgroups)
}

// userCgroupOf is the cgroup tree id of owner goes in: one in the
// owner's own delegated cgroup, or "" for the daemon's (root's trees, and
// users with no such cgroup).
func (d *Daemon) userCgroupOf(owner proctable.Owner, id string) string {
	if d.users == nil || owner.UID == 0 {
		return ""
	}
	return d.users.Dir(owner.UID, owner.User, id)
}

// placeUserInit puts a new tree's init in its owner's cgroup, before the
// command starts, so the whole tree is born under the owner's limits. A
// tree that cannot go there does not start: where a user has limits of
// their own, the daemon never runs their code outside them.
func (d *Daemon) placeUserInit(rec proctable.Record, initPID int) error {
	if err := d.users.Place(rec.Cgroup, initPID, rec.Nice); err != nil {
		return fmt.Errorf("run %q: the cgroup of user %s: %w", rec.Name, rec.Owner.User, err)
	}
	return nil
}
