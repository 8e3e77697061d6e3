package daemon

import (
	"os"
	"strconv"
	"testing"
)

// procsWhere lists the pids in /proc for which keep holds.
func procsWhere(t testing.TB, keep func(pid int) bool) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil && keep(pid) {
			out = append(out, pid)
		}
	}
	return out
}
