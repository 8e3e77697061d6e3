package sandbox

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// supervisorCaps are the capabilities a supervisor holds, and what none of
// the caller's processes has, so the kernel refuses them ptrace and
// pidfd_getfd of it: CAP_SYS_ADMIN and CAP_DAC_OVERRIDE for CRIU's
// parasite, which mounts a proc instance in the supervisor's root-only
// working directory when it dumps the tree (criu/pie/parasite.c,
// get_proc_fd: "can't dump unprivileged task whose /proc doesn't belong to
// it" without them), and to rotate the log in the root-only log directory;
// CAP_CHOWN to give a rotated log back to root.
var supervisorCaps = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_DAC_OVERRIDE, unix.CAP_CHOWN}

// capMask is caps as a bit mask, as /proc/<pid>/status prints capability sets.
func capMask(caps []uintptr) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << c
	}
	return m
}

// dropThreadCaps empties every capability set of the calling OS thread
// (effective, permitted, inheritable and ambient): a process this thread
// starts then runs with exactly the capabilities its credentials give it at
// execve (none for a non-root uid). Capabilities are per thread; the
// caller locks its goroutine to the thread, which then executes the
// command or dies with the goroutine.
func dropThreadCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}

// HasSupervisorCaps reports whether the process pid holds the effective
// capabilities of a supervisor: a process of the caller's can look like a
// supervisor in every other way, but cannot hold these.
func HasSupervisorCaps(pid int) bool {
	b, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/status", procfs.MaxStatus)
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			want := capMask(supervisorCaps)
			return err == nil && eff&want == want
		}
	}
	return false
}
