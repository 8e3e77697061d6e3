package testutil

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
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
