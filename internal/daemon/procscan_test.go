package daemon

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// refersTo reports whether pid names dir in its command line, environment,
// working directory or open files: a process of the test that owns dir.
func refersTo(pid int, dir string) bool {
	base := fmt.Sprintf("/proc/%d/", pid)
	for _, f := range []string{"cmdline", "environ"} {
		if b, err := os.ReadFile(base + f); err == nil && bytes.Contains(b, []byte(dir)) {
			return true
		}
	}
	if cwd, err := os.Readlink(base + "cwd"); err == nil && strings.HasPrefix(cwd, dir) {
		return true
	}
	fds, _ := os.ReadDir(base + "fd")
	for _, fd := range fds {
		if l, err := os.Readlink(base + "fd/" + fd.Name()); err == nil && strings.HasPrefix(l, dir) {
			return true
		}
	}
	return false
}

// killLeftOver SIGKILLs every process but this one that refers to dir:
// the trees and helpers a daemon killed by a test left behind.
func killLeftOver(t testing.TB, dir string) {
	self := os.Getpid()
	for _, pid := range procsWhere(t, func(pid int) bool { return pid != self && refersTo(pid, dir) }) {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}
