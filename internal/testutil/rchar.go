package testutil

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// RChar is the number of bytes process pid ("self" for this one) has read
// so far (/proc/<pid>/io), including what the children it reaped read. It
// skips t without I/O accounting.
func RChar(t testing.TB, pid string) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/io")
	if err != nil {
		t.Skipf("no I/O accounting: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/" + pid + "/io has no rchar")
	return 0
}

// Cost is what this process read (RChar) and allocated (the Go heap's
// TotalAlloc) while fn ran.
func Cost(t testing.TB, fn func()) (read, alloc uint64) {
	t.Helper()
	var before, after runtime.MemStats
	r0 := RChar(t, "self")
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return RChar(t, "self") - r0, after.TotalAlloc - before.TotalAlloc
}
