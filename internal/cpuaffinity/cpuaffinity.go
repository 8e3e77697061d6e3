// Package cpuaffinity places the daemon's threads and what it starts for
// users on CPUs. An operator may set CPUs apart for the daemon
// (--daemon-cpus), so that a request's wake-up never waits behind a
// user's threads there; and a tree keeps the CPUs of the process that
// asked for it (a user's taskset, or a batch step's cpuset), as it keeps
// its resource limits. A thread's affinity (sched_setaffinity, sched(7))
// is taken by the threads and processes it starts and kept across execve,
// and CRIU does not restore it (a restored process runs where CRIU did):
// so the daemon confines every thread it has at start, and starts each
// process for a user from a thread of its own on the CPUs the daemon had
// before less its own, and of those the tree's.
// Without either nothing changes: a daemon its operator started on some
// CPUs (systemd's CPUAffinity=) still starts everything there.
package cpuaffinity

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// maxCPU is one past the highest CPU a set can name (unix.CPUSet's size).
const maxCPU = len(unix.CPUSet{}) * 64

// Parse reads a CPU list as the kernel writes one (cpuset(7), "List
// format"; /sys/devices/system/cpu/online): CPU numbers and inclusive
// ranges, comma-separated, such as "0-3,8".
func Parse(list string) (unix.CPUSet, error) {
	var set unix.CPUSet
	if strings.TrimSpace(list) == "" {
		return set, errors.New("no CPU listed")
	}
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		first, err := cpuNumber(lo)
		if err != nil {
			return set, err
		}
		last := first
		if isRange {
			if last, err = cpuNumber(hi); err != nil {
				return set, err
			}
			if last < first {
				return set, fmt.Errorf("range %q runs backwards", part)
			}
		}
		for cpu := first; cpu <= last; cpu++ {
			set.Set(cpu)
		}
	}
	return set, nil
}

func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	if n >= maxCPU {
		return 0, fmt.Errorf("CPU %d: past the last one this build knows (%d)", n, maxCPU-1)
	}
	return n, nil
}

// Format writes set as a CPU list, ranges folded ("0-3,8").
func Format(set unix.CPUSet) string {
	var parts []string
	for cpu := 0; cpu < maxCPU; cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		last := cpu
		for last+1 < maxCPU && set.IsSet(last+1) {
			last++
		}
		if last == cpu {
			parts = append(parts, strconv.Itoa(cpu))
		} else {
			parts = append(parts, strconv.Itoa(cpu)+"-"+strconv.Itoa(last))
		}
		cpu = last
	}
	return strings.Join(parts, ",")
}

// released is where StartOn starts processes: the affinity this process had
// when Confine first changed it, less the CPUs Confine set apart (all of
// it where that leaves none).
var released struct {
	sync.Mutex
	set      unix.CPUSet
	confined bool
}

// Confine puts every thread of this process on set, and returns the CPUs
// they run on: set less those the kernel does not let this process use
// (offline, or outside its cgroup's cpuset). A set with none it may use
// is an error, and changes nothing.
func Confine(set unix.CPUSet) (unix.CPUSet, error) {
	var was, got unix.CPUSet
	runtime.LockOSThread() // the same thread is asked, set, and asked again
	defer runtime.UnlockOSThread()
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return got, err
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return got, fmt.Errorf("none of these CPUs is one this process may run on (%s)", Format(was))
		}
		return got, err
	}
	released.Lock()
	if !released.confined {
		released.set, released.confined = without(was, set), true
	}
	released.Unlock()
	if err := unix.SchedGetaffinity(0, &got); err != nil {
		return got, err
	}
	return got, procfs.EachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &set) })
}

// without is from less apart's CPUs, or from where that leaves none.
func without(from, apart unix.CPUSet) unix.CPUSet {
	var rest unix.CPUSet
	for i := range from {
		rest[i] = from[i] &^ apart[i]
	}
	if rest.Count() == 0 {
		return from
	}
	return rest
}

// forUsers is the CPUs the processes the daemon starts for users may run
// on, and whether they differ from those a process it starts takes from
// it: the CPUs this process had before Confine less those it set apart;
// without Confine its own.
func forUsers() (unix.CPUSet, bool, error) {
	released.Lock()
	set, confined := released.set, released.confined
	released.Unlock()
	if confined {
		return set, true, nil
	}
	err := unix.SchedGetaffinity(0, &set)
	return set, false, err
}

// ErrNoCPU is Caller's refusal of a process with none of the CPUs the
// daemon gives users.
var ErrNoCPU = errors.New("no CPU for the tree")

// Caller is what a tree started for process pid keeps of its CPUs (its
// affinity, which within a cpuset cgroup is at most the cpuset's), as a
// CPU list for StartOn: "" where they take in every CPU the daemon gives
// users, so that there is nothing to keep. A process with none of those
// CPUs is an error: its tree would have nowhere to run.
func Caller(pid int) (string, error) {
	var caller unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &caller); err != nil {
		return "", fmt.Errorf("the CPUs of pid %d: %w", pid, err)
	}
	users, _, err := forUsers()
	if err != nil {
		return "", err
	}
	both := within(caller, users)
	switch {
	case both == users:
		return "", nil
	case both.Count() == 0:
		return "", fmt.Errorf("%w: the calling process may run only on CPUs %s, and the daemon runs users' processes on %s only", ErrNoCPU, Format(caller), Format(users))
	}
	return Format(caller), nil
}

// within is the CPUs of a that are in b.
func within(a, b unix.CPUSet) unix.CPUSet {
	var both unix.CPUSet
	for i := range a {
		both[i] = a[i] & b[i]
	}
	return both
}

// StartOn runs start, which starts a process for a user (an exec.Cmd's
// Start), so that the process is born on the CPUs the daemon gives users
// (forUsers) and, of those, on cpus: a tree's own (Caller's list), "" for
// all of them; where cpus has none of them left (the daemon's CPUs changed
// since they were read), on all of them. A process takes the affinity of
// the thread that forks it, so start runs on a thread locked to it and
// given that affinity, and the thread is given back to the runtime only
// once its own affinity is restored (else it ends with its goroutine, or
// is parked for good where it is the main thread). The threads the
// runtime starts meanwhile are not cloned from it (a locked thread has
// its template thread start them). Nothing of the process runs on the
// daemon's own CPUs, not even its start. With no Confine and no cpus it
// is start.
func StartOn(cpus string, start func() error) error {
	set, changed, err := target(cpus)
	if err != nil || !changed {
		if err == nil {
			err = start()
		}
		return err
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // unlocked only as it was
		restored, err := startFrom(set, start)
		done <- err
		if restored {
			runtime.UnlockOSThread()
		}
	}()
	return <-done
}

// StartOnLocked is StartOn for a caller whose goroutine is locked to its
// thread (runtime.LockOSThread) and stays so while the process lives,
// because the process's parent-death signal follows the thread that forked
// it. The thread is given the CPUs for the start and its own back after;
// restored is false where they could not be: the caller must then end its
// goroutine still locked, so that the thread ends with it.
func StartOnLocked(cpus string, start func() error) (restored bool, err error) {
	set, changed, err := target(cpus)
	if err != nil || !changed {
		if err == nil {
			err = start()
		}
		return true, err
	}
	return startFrom(set, start)
}

// target is the CPUs StartOn starts a process on for cpus, and whether
// they differ from this thread's own.
func target(cpus string) (unix.CPUSet, bool, error) {
	set, changed, err := forUsers()
	if err != nil || cpus == "" {
		return set, changed, err
	}
	own, err := Parse(cpus)
	if err != nil {
		return set, false, err
	}
	if both := within(own, set); both.Count() > 0 && both != set {
		set, changed = both, true
	}
	return set, changed, nil
}

// startFrom runs start on this thread, locked by its caller, given set,
// and gives the thread its own CPUs back; restored says whether it could.
func startFrom(set unix.CPUSet, start func() error) (restored bool, err error) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return true, err
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return true, fmt.Errorf("CPUs %s for a process to start: %w", Format(set), err)
	}
	err = start()
	return unix.SchedSetaffinity(0, &was) == nil, err
}
