package testutil

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// CgroupTop makes a cgroup of the test's own on this machine's cgroup2
// mount (skipping where there is none) and returns the mount and the
// cgroup; both are removed when t ends, with the cgroups two levels below
// it, after the cleanups registered later (a daemon's trees).
func CgroupTop(t testing.TB) (mnt, top string) {
	t.Helper()
	RequiresRoot(t)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if i := slices.Index(fields, "-"); i > 4 && i+1 < len(fields) && fields[i+1] == "cgroup2" {
			mnt = fields[4]
			break
		}
	}
	if mnt == "" {
		t.Skip("no cgroup2 mount on this machine")
	}
	top = filepath.Join(mnt, fmt.Sprintf("gsrlim-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-")))
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(top)
		for _, e := range ents {
			if e.IsDir() {
				sub, _ := os.ReadDir(filepath.Join(top, e.Name()))
				for _, s := range sub {
					if s.IsDir() {
						_ = unix.Rmdir(filepath.Join(top, e.Name(), s.Name()))
					}
				}
				_ = unix.Rmdir(filepath.Join(top, e.Name()))
			}
		}
		if err := unix.Rmdir(top); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	return mnt, top
}

// CgroupOf is pid's cgroup v2 path (the "0::" line of /proc/PID/cgroup).
func CgroupOf(t testing.TB, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rel, ok := strings.CutPrefix(l, "0::"); ok {
			return rel
		}
	}
	t.Fatalf("pid %d has no cgroup v2 line: %q", pid, b)
	return ""
}

// CgroupCPU is the CPU time, in microseconds, that the processes of
// cgroup dir and its descendants, live or gone, have spent (usage_usec of
// its cpu.stat, which cgroup v2 keeps without the cpu controller).
func CgroupCPU(t testing.TB, dir string) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("%s/cpu.stat: %v", dir, err)
			}
			return n
		}
	}
	t.Fatalf("%s/cpu.stat has no usage_usec: %q", dir, b)
	return 0
}

// CgroupV1Mount is where this machine mounts the cgroup v1 hierarchy of
// controller ("pids", "memory"; a cgroup v1 or hybrid host); it skips t
// where none is.
func CgroupV1Mount(t testing.TB, controller string) string {
	t.Helper()
	RequiresRoot(t)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if i := slices.Index(fields, "-"); i > 4 && i+3 < len(fields) && fields[i+1] == "cgroup" && slices.Contains(strings.Split(fields[i+3], ","), controller) {
			return fields[4]
		}
	}
	t.Skipf("no cgroup v1 %s hierarchy here (a cgroup v2 host)", controller)
	return ""
}
