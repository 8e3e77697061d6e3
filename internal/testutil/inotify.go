package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// InotifyInstances is how many inotify instances this process holds: its
// descriptors that link to anon_inode:inotify.
func InotifyInstances(t testing.TB) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		// A descriptor closed since the listing has no link: not counted.
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// InotifyLimit is the host's inotify instance limit per user
// (fs.inotify.max_user_instances); it skips t where there is none to read.
func InotifyLimit(t testing.TB) int {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		t.Skipf("no inotify limit to read: %v", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
