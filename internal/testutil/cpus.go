package testutil

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/procfs"
)

// CPUsApart is the first CPU this process may run on and the others, as
// CPU lists: a --daemon-cpus to set apart, and where what the daemon
// starts for users should run. It skips t where there is only one.
func CPUsApart(t testing.TB) (first, rest string) {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	if set.Count() < 2 {
		t.Skipf("this process may run on CPU %s only: nothing to set apart", cpuaffinity.Format(set))
	}
	var one unix.CPUSet
	for cpu := 0; ; cpu++ {
		if set.IsSet(cpu) {
			one.Set(cpu)
			set.Clear(cpu)
			return cpuaffinity.Format(one), cpuaffinity.Format(set)
		}
	}
}

// ConfineSelf confines this process as gpuschedd --daemon-cpus does, to
// CPUsApart's first CPU, until t ends, and returns CPUsApart's lists.
func ConfineSelf(t testing.TB) (first, rest string) {
	t.Helper()
	first, rest = CPUsApart(t)
	restoreAffinity(t)
	set, err := cpuaffinity.Parse(first)
	if err == nil {
		_, err = cpuaffinity.Confine(set)
	}
	if err != nil {
		t.Fatal(err)
	}
	return first, rest
}

// RunSelfOn puts every thread of this process on cpus (a CPU list) until t
// ends, as a user's taskset would: what it starts meanwhile runs there
// too. Unlike ConfineSelf it leaves the daemon's placement alone.
func RunSelfOn(t testing.TB, cpus string) {
	t.Helper()
	restoreAffinity(t)
	set, err := cpuaffinity.Parse(cpus)
	if err == nil {
		err = procfs.EachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &set) })
	}
	if err != nil {
		t.Fatal(err)
	}
}

// restoreAffinity puts every thread of this process back on the CPUs it
// has now when t ends.
func restoreAffinity(t testing.TB) {
	t.Helper()
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { procfs.EachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &orig) }) })
}

// WantThreadsOn checks that every thread of pid may run on cpus (a CPU
// list) and on no other CPU.
func WantThreadsOn(t testing.TB, what string, pid int, cpus string) {
	t.Helper()
	err := procfs.EachThreadOf(pid, func(tid int) error {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) != cpus {
				t.Errorf("%s (pid %d), thread %d: on CPUs %s, want %s", what, pid, tid, strings.TrimSpace(v), cpus)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
