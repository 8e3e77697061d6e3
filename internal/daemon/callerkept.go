package daemon

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/oomscore"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/rlimit"
)

// keptOfCaller is what the managed process a request asks for keeps of
// the process that made it, read now: its resource limits and
// oom_score_adj (from /proc) and its CPUs (cpuaffinity.Caller). A caller
// keeps its own ulimits, its weight before the OOM killer, and its
// taskset or batch step's cpuset, whatever the daemon's are. The
// process must still be the one that connected (pid and start time) and
// hold the connection's uid, so that neither a reused pid nor a setuid
// program lends its limits. A non-root caller whose process is gone or
// changed is refused; root's process then runs with the daemon's limits
// and CPUs (none kept) at an oom_score_adj of 0. A caller with none of
// the CPUs the daemon gives users is refused.
func keptOfCaller(a actor, what string) (kept, error) {
	k, err := readPeerKept(a)
	switch {
	case err == nil:
		return k, nil
	case errors.Is(err, cpuaffinity.ErrNoCPU):
		return kept{}, invalidf("%s: %v; send the request from a process that may run on one of those", what, err)
	case a.root():
		return kept{}, nil
	}
	return kept{}, deniedf("%s: the resource limits of the connecting process cannot be read (%v); send the request from a process that stays connected and keeps its uid", what, err)
}

// kept is what a tree keeps of the process that asked for it.
type kept struct {
	rlimits     rlimit.Set // nil: the daemon's
	cpus        string     // a CPU list; "": those the daemon gives users
	oomScoreAdj int        // never the daemon's, which the unit sets below every user's
}

// readPeerKept reads the limits, oom_score_adj and CPUs of a's process,
// which must hold a's uid throughout (readPeer).
func readPeerKept(a actor) (kept, error) {
	return readPeer(a, func(pid int) (kept, error) {
		s, err := rlimit.Of(pid)
		if err != nil {
			return kept{}, err
		}
		cpus, err := cpuaffinity.Caller(pid)
		if err != nil {
			return kept{}, err
		}
		adj, err := oomscore.Of(pid)
		if err != nil {
			return kept{}, err
		}
		return kept{rlimits: s, cpus: cpus, oomScoreAdj: adj}, sameUID(pid, a.UID)
	})
}

// readPeer reads something of a's process with read, checking its
// identity around the read: the pidfd taken first names the process that
// connected (actor.openPeer), and it still running at the end means the
// pid named it throughout.
func readPeer[T any](a actor, read func(pid int) (T, error)) (T, error) {
	var zero T
	pidfd, err := a.openPeer()
	if err != nil {
		return zero, err
	}
	defer unix.Close(pidfd)
	v, err := read(a.PID)
	if err != nil {
		return zero, err
	}
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return zero, fmt.Errorf("pid %d: %w", a.PID, procfs.ErrGone)
	}
	return v, nil
}

// sameUID checks that every uid of pid (real, effective, saved, file
// system) is uid.
func sameUID(pid int, uid uint32) error {
	b, err := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/status", procfs.MaxStatus)
	if err != nil {
		return fmt.Errorf("pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		ids := strings.Fields(v)
		if len(ids) != 4 {
			return fmt.Errorf("pid %d: malformed Uid line %q", pid, line)
		}
		for _, id := range ids {
			if id != strconv.FormatUint(uint64(uid), 10) {
				return fmt.Errorf("pid %d runs as uid %s now, not %d", pid, id, uid)
			}
		}
		return nil
	}
	return fmt.Errorf("pid %d: no Uid line", pid)
}
