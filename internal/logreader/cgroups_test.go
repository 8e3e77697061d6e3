package logreader

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestReadMounts: the first whole-hierarchy mount of cgroup2 and of the
// cpu and cpuacct controllers, apart or together, with mountinfo's escapes.
func TestReadMounts(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo string
		want            mounts
	}{
		{"hybrid, cpu and cpuacct apart", `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`, mounts{unified: "/sys/fs/cgroup/unified", cpu: "/sys/fs/cgroup/cpu", cpuacc: "/sys/fs/cgroup/cpuacct"}},
		{"v1, cpu and cpuacct together", `25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:9 - cgroup cgroup rw,cpu,cpuacct
`, mounts{cpu: "/sys/fs/cgroup/cpu,cpuacct", cpuacc: "/sys/fs/cgroup/cpu,cpuacct"}},
		{"unified, a bind mount of a subtree and an escaped name", `40 30 0:26 /user.slice /mnt/sub rw - cgroup2 cgroup2 rw
41 30 0:26 / /sys/fs/my\040cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate
`, mounts{unified: "/sys/fs/my cgroup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "mountinfo")
			if err := os.WriteFile(file, []byte(tc.mountinfo), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := readMounts(file)
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestParseCgroups: a process's place in the unified hierarchy and in the
// v1 hierarchies of cpu and cpuacct, once each; other controllers are left
// out, and a path that is not clean and absolute is refused.
func TestParseCgroups(t *testing.T) {
	hybrid := mounts{unified: "/u", cpu: "/c", cpuacc: "/a"}
	together := mounts{cpu: "/ca", cpuacc: "/ca"}
	for _, tc := range []struct {
		name, file string
		m          mounts
		want       Cgroups
		bad        bool
	}{
		{"hybrid", "9:name=systemd:/user.slice\n4:memory:/m\n2:cpuacct:/user.slice/x\n1:cpu:/user.slice/x\n0::/user.slice/x\n", hybrid,
			Cgroups{Unified: "/u/user.slice/x", V1: []string{"/a/user.slice/x", "/c/user.slice/x"}}, false},
		{"together", "3:cpu,cpuacct:/s\n", together, Cgroups{V1: []string{"/ca/s"}}, false},
		{"unified only", "0::/user.slice/user-1000.slice/session-2.scope\n", mounts{unified: "/sys/fs/cgroup"},
			Cgroups{Unified: "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope"}, false},
		{"a hierarchy not mounted here", "1:cpu:/x\n0::/x\n", mounts{}, Cgroups{}, false},
		{"climbing out", "0::/x/../../etc\n", hybrid, Cgroups{}, true},
		{"relative", "1:cpu:x\n", hybrid, Cgroups{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCgroups(tc.file, tc.m)
			if tc.bad != (err != nil) || got.Unified != tc.want.Unified || !slices.Equal(got.V1, tc.want.V1) {
				t.Fatalf("got %+v, %v; want %+v (error: %v)", got, err, tc.want, tc.bad)
			}
		})
	}
}
