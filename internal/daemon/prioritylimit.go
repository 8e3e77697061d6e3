package daemon

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/limits"
)

// --user-max-priority: the highest priority a non-root user may give a
// job (submit), a lease (acquire) or a process's policy (run, set); above
// it a call is refused with resource_exhausted.
const flagMaxPriority = "user-max-priority"

// checkUserPriority refuses a's priority when it is above the cap.
func (d *Daemon) checkUserPriority(a actor, what string, priority int) error {
	ceiling := d.cfg.Limits.MaxPriority
	if a.root() || priority <= ceiling {
		return nil
	}
	return &limits.Exceeded{Flag: flagMaxPriority, Msg: fmt.Sprintf("%s: priority %d is above %d, the most --%s allows user %s; ask the operator to raise --%s",
		what, priority, ceiling, flagMaxPriority, a.User, flagMaxPriority)}
}
