// Package oomscore reads and sets a process's oom_score_adj: what the
// kernel's OOM killer adds to its size when it picks whom to kill
// (Documentation/filesystems/proc.rst, "/proc/<pid>/oom_score_adj").
//
// The daemon runs below its users (the unit's OOMScoreAdjust=-900, as
// Debian's postgresql@.service keeps its postmaster while its backends
// reset theirs to 0), and each tree it starts takes the value of the
// process that asked for it. The value is per process and a child takes
// its parent's, together with the floor below which it may not go
// without CAP_SYS_RESOURCE (oom_score_adj_min, set by a write that holds
// the capability; mm/oom_kill.c and fs/proc/base.c, __set_oom_adj).
package oomscore

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Min and Max bound a value (include/uapi/linux/oom.h, OOM_SCORE_ADJ_MIN
// and OOM_SCORE_ADJ_MAX); Min exempts a process from the OOM killer.
const (
	Min = -1000
	Max = 1000
)

// ErrBelowFloor means the value is below what the writer may set: the
// process's own floor, without CAP_SYS_RESOURCE (the kernel's EACCES).
var ErrBelowFloor = errors.New("below the floor this process may set without CAP_SYS_RESOURCE")

// Validate checks that v is a value the kernel takes.
func Validate(v int) error {
	if v < Min || v > Max {
		return fmt.Errorf("oom_score_adj %d is outside %d..%d", v, Min, Max)
	}
	return nil
}

// Of reads pid's value.
func Of(pid int) (int, error) {
	b, err := procfs.ReadFile(path(pid), 16)
	if err != nil {
		return 0, fmt.Errorf("pid %d oom_score_adj: %w", pid, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("pid %d oom_score_adj: %w", pid, err)
	}
	return v, Validate(v)
}

// Set writes pid's value. Written by a process holding CAP_SYS_RESOURCE
// it is also pid's floor: pid and its children cannot go below it.
func Set(pid, v int) error {
	if err := Validate(v); err != nil {
		return err
	}
	f, err := os.OpenFile(path(pid), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pid %d oom_score_adj: %w", pid, err)
	}
	defer f.Close()
	_, err = f.WriteString(strconv.Itoa(v))
	if errors.Is(err, unix.EACCES) {
		return fmt.Errorf("pid %d oom_score_adj %d: %w", pid, v, ErrBelowFloor)
	}
	if err != nil {
		return fmt.Errorf("pid %d oom_score_adj %d: %w", pid, v, err)
	}
	return nil
}

func path(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/oom_score_adj" }
