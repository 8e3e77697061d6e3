package checkpoint

import (
	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
)

// placeWorker readies a process just started for a tree, before it has
// work: on the CPUs the daemon gives users and, of those, on the tree's
// own cpus (cpuaffinity.Place), and into cgroups (one directory per
// hierarchy; none: it stays in its starter's).
func placeWorker(pid int, cpus string, cgroups []string) error {
	if err := cpuaffinity.Place(pid, cpus); err != nil {
		return err
	}
	return cgroup.Move(pid, cgroups...)
}
