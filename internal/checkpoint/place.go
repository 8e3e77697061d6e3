package checkpoint

import (
	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
)

// releaseAndMove readies a process just started, before it has work: off
// the daemon's own CPUs (--daemon-cpus), and into cgroups (one directory
// per hierarchy; none: it stays in its starter's).
func releaseAndMove(pid int, cgroups []string) error {
	if err := cpuaffinity.ReleaseProcess(pid); err != nil {
		return err
	}
	return cgroup.Move(pid, cgroups...)
}
