package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
)

// CPUSeconds is the user plus system CPU time process pid has used
// (utime and stime of /proc/PID/stat, in USER_HZ ticks of 10 ms).
func CPUSeconds(t testing.TB, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // comm may hold spaces and parens
	if i < 0 || i+2 > len(s) {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	f := strings.Fields(s[i+2:]) // fields from the 3rd (state) on
	if len(f) < 13 {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	return float64(ut+st) / 100
}

// CPUBusySeconds is the time the CPUs listed (a CPU list) have spent
// running anything since boot: user, nice, system, irq and softirq of
// their /proc/stat lines, in USER_HZ ticks of 10 ms.
func CPUBusySeconds(t testing.TB, cpus string) float64 {
	t.Helper()
	set, err := cpuaffinity.Parse(cpus)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	var ticks uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		n, ok := strings.CutPrefix(f[0], "cpu")
		if cpu, err := strconv.Atoi(n); !ok || err != nil || !set.IsSet(cpu) {
			continue
		}
		for _, i := range []int{1, 2, 3, 6, 7} { // user nice system (idle iowait) irq softirq
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				t.Fatalf("/proc/stat: %q", line)
			}
			ticks += v
		}
	}
	return float64(ticks) / 100
}
