package daemon

import (
	"fmt"
	"os"

	"github.com/gpusched/gpusched/internal/proctable"
)

// criuCgroupName names, in a user's delegated cgroup, the cgroup their
// CRIU operations run in (cgroup.Users makes it gpusched-criu): one for
// all of them, as they run one at a time (criuTurns). Record ids are
// UUIDs, so no tree's cgroup has that name.
const criuCgroupName = "criu"

// criuCgroup opens the cgroup a CRIU worker asked for by owner, or by the
// daemon restoring one of owner's trees, is moved into: in owner's own
// delegated cgroup, so that CRIU's CPU, memory and tasks weigh against
// owner's limits and accounting as their trees' do, and not against the
// daemon's, shared by every user. It is nil (the daemon's cgroup) for
// root and for users with no such cgroup (userCgroupOf). The daemon's
// own dumps (evictions, ttl policies) never run there: owner may freeze
// or kill what is in their cgroup, and those must not wait on owner.
func (d *Daemon) criuCgroup(owner proctable.Owner) (*os.File, error) {
	dir := d.userCgroupOf(owner, criuCgroupName)
	if dir == "" {
		return nil, nil
	}
	cg, err := d.users.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("the cgroup of user %s for CRIU: %w", owner.User, err)
	}
	return cg, nil
}
