package testutil

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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

// WatchDir watches dir for entries made, removed, moved or changed in
// mode or owner, until t ends; the function it returns says which names
// such events named so far.
func WatchDir(t testing.TB, dir string) func() []string {
	t.Helper()
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(in) })
	if _, err := unix.InotifyAddWatch(in, dir, unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_FROM|unix.IN_MOVED_TO|unix.IN_ATTRIB); err != nil {
		t.Fatal(err)
	}
	var names []string
	return func() []string {
		buf := make([]byte, 64<<10)
		for {
			n, err := unix.Read(in, buf)
			if err != nil || n <= 0 {
				return names
			}
			for off := 0; off+unix.SizeofInotifyEvent <= n; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				start := off + unix.SizeofInotifyEvent
				names = append(names, strings.TrimRight(string(buf[start:start+int(ev.Len)]), "\x00"))
				off = start + int(ev.Len)
			}
		}
	}
}
