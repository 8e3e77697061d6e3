package simgpu

import (
	"errors"
	"fmt"

	"github.com/gpusched/gpusched/internal/procfs"
)

// readStat reads pid's stat, reporting a missing process as ErrNoSuchProcess.
func readStat(pid int) (procfs.Stat, error) {
	if pid <= 0 {
		return procfs.Stat{}, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	st, err := procfs.ReadStat(pid)
	if errors.Is(err, procfs.ErrGone) {
		return procfs.Stat{}, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	return st, err
}
