// Package cpuslice asks the kernel for a short scheduler slice for every
// thread of this process. Under EEVDF (Linux 6.12 and later) a thread
// woken with a shorter slice than the one running on its CPU gets an
// earlier deadline and preempts it (PREEMPT_SHORT), and the shortest slice
// of a group's threads is its group's (6.13's min_slice), so a daemon
// thread woken by a request no longer waits out a CPU-bound user's slice
// (3 ms on a machine of 8 CPUs or more). The slice is set with
// sched_setattr's sched_runtime under the thread's own policy and nice,
// which takes no privilege (sched(7), "SCHED_OTHER"; kernel/sched/syscalls.c,
// __setparam_fair clamps it to 0.1..100 ms), with SCHED_FLAG_RESET_ON_FORK:
// processes the daemon starts, and the threads the Go runtime adds later,
// begin at the kernel's default slice, and Keep gives those threads the
// short one at its next pass.
package cpuslice

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Min and Max are the slices the kernel takes (__setparam_fair's clamp).
const (
	Min = 100 * time.Microsecond
	Max = 100 * time.Millisecond
)

// ErrUnsupported is Keep's answer where the kernel keeps no slice per
// thread (before 6.12) or the policy is not a fair one.
var ErrUnsupported = errors.New("the kernel keeps no per-thread slice (EEVDF custom slices need Linux 6.12 or later)")

// Set gives every thread of this process slice d, keeping each thread's
// policy; a thread the runtime started since (at the default slice, its
// nice reset to 0 if it was below) gets nice too, the process's nice when
// Set first ran. Threads already at d are left alone. It returns how many
// threads it changed.
func Set(d time.Duration, nice int) (int, error) {
	tids, err := procfs.SelfThreads()
	if err != nil {
		return 0, err
	}
	changed := 0
	for _, tid := range tids {
		ok, err := setThread(tid, d, nice)
		if errors.Is(err, unix.ESRCH) { // the thread exited
			continue
		}
		if err != nil {
			return changed, err
		}
		if ok {
			changed++
		}
	}
	return changed, nil
}

// setThread gives thread tid slice d and nice (see Set); false where it
// already had them or its policy is not a fair one.
func setThread(tid int, d time.Duration, nice int) (bool, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return false, err
	}
	if a.Policy != unix.SCHED_NORMAL && a.Policy != unix.SCHED_BATCH {
		return false, nil
	}
	if a.Runtime == uint64(d) && a.Flags&unix.SCHED_FLAG_RESET_ON_FORK != 0 {
		return false, nil
	}
	return true, unix.SchedSetAttr(tid, &unix.SchedAttr{
		Size:    unix.SizeofSchedAttr,
		Policy:  a.Policy,
		Flags:   unix.SCHED_FLAG_RESET_ON_FORK,
		Nice:    int32(nice),
		Runtime: uint64(d),
	}, 0)
}

// Of is thread tid's slice as the kernel reports it (the default where
// none was asked for; 0 before Linux 6.12).
func Of(tid int) (time.Duration, error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, err
	}
	return time.Duration(a.Runtime), nil
}

// Keep sets slice d on every thread now (see Set) and again every period
// until ctx ends, for the threads the runtime starts meanwhile. It returns
// ErrUnsupported at once where the kernel did not take the slice.
func Keep(ctx context.Context, d, period time.Duration) error {
	nice, err := ProcessNice()
	if err != nil {
		return err
	}
	if _, err := Set(d, nice); err != nil {
		return err
	}
	if got, err := Of(unix.Gettid()); err != nil {
		return err
	} else if got != d {
		return ErrUnsupported
	}
	go func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				Set(d, nice) // a failure here is one the first pass did not have; the next pass tries again
			}
		}
	}()
	return nil
}

// ProcessNice is the main thread's nice.
func ProcessNice() (int, error) {
	a, err := unix.SchedGetAttr(os.Getpid(), 0)
	if err != nil {
		return 0, err
	}
	return int(a.Nice), nil
}
