package daemon

import (
	"fmt"
	"runtime"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
)

// confineToDaemonCPUs puts every thread of the daemon on --daemon-cpus and
// sizes the Go runtime to them (GOMAXPROCS, so the bulk gate leaves one
// of them to quick calls), before anything is built on that size. What it
// starts for users is released as it starts (cpuaffinity). It returns the
// CPUs the threads run on, "" without the setting.
func confineToDaemonCPUs(list string) (string, error) {
	if list == "" {
		return "", nil
	}
	set, err := cpuaffinity.Parse(list)
	if err == nil {
		set, err = cpuaffinity.Confine(set)
	}
	if err != nil {
		return "", fmt.Errorf("--daemon-cpus %q: %w", list, err)
	}
	runtime.GOMAXPROCS(set.Count())
	return cpuaffinity.Format(set), nil
}

// logDaemonCPUs says where confineToDaemonCPUs put the daemon, and which
// of the CPUs asked for it could not have.
func (d *Daemon) logDaemonCPUs(on string) {
	switch {
	case on == "":
	case on == d.cfg.DaemonCPUs:
		d.log.Info("the daemon's threads run on CPUs of their own; what it starts for users runs off them", zap.String("cpus", on))
	default:
		d.log.Warn("the daemon's threads run on fewer CPUs than --daemon-cpus lists (the others are offline or outside its cpuset)",
			zap.String("asked", d.cfg.DaemonCPUs), zap.String("cpus", on))
	}
}
