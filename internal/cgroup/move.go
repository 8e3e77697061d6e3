package cgroup

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// Move moves process pid into each cgroup directory of dirs (one per
// hierarchy) through its cgroup.procs: all its threads go, and what it
// forks later is born there. The daemon starts the processes it runs on a
// user's behalf in its own cgroups and moves them before they have work,
// rather than have them born in the user's (clone3 CLONE_INTO_CGROUP): Go
// starts a child as vfork does, its parent thread waiting, holding its P,
// until the child runs its program, and a child born in a cgroup the user
// froze never does, so the daemon would stop at its next garbage
// collection for as long as the user kept it frozen. A process moved into
// a frozen cgroup is frozen, and can still be killed.
func Move(pid int, dirs ...string) error {
	for _, dir := range dirs {
		if err := writeFile(filepath.Join(dir, "cgroup.procs"), strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup %s: move pid %d: %w", dir, pid, err)
		}
	}
	return nil
}
