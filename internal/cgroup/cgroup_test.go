package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestWeight(t *testing.T) {
	// Expected values are the kernel's sched_prio_to_weight entries
	// scaled by 100/1024 and rounded down.
	tests := []struct {
		nice int
		want uint64
	}{
		{-20, 8668}, // 88761*100/1024
		{-5, 304},   // 3121*100/1024
		{0, 100},
		{5, 32}, // 335*100/1024
		{19, 1}, // 15*100/1024, clamped up to cpu.weight's minimum
		{-30, 8668},
		{40, 1},
	}
	for _, tt := range tests {
		if got := Weight(tt.nice); got != tt.want {
			t.Errorf("Weight(%d) = %d, want %d", tt.nice, got, tt.want)
		}
	}
	for n := -20; n < 19; n++ {
		if Weight(n) < Weight(n+1) {
			t.Errorf("Weight(%d) = %d < Weight(%d) = %d: a lower nice must never weigh less", n, Weight(n), n+1, Weight(n+1))
		}
	}
}

// TestDetectHost runs the automatic detection against this machine. On a
// cgroup v1 or hybrid host (as CI is) it must report that with a reason;
// elsewhere it may succeed, and it never changes anything.
func TestDetectHost(t *testing.T) {
	m, err := Detect("")
	if isCgroup2(Mount) {
		if err != nil && (!errors.Is(err, ErrUnavailable) || err.Error() == ErrUnavailable.Error()) {
			t.Fatalf("Detect on a cgroup2 host: %v, want success or a reason wrapping ErrUnavailable", err)
		}
		t.Logf("cgroup2 host: manager %v, err %v", m, err)
		return
	}
	if m != nil || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Detect on a non-cgroup2 host = %v, %v; want ErrUnavailable", m, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "v1") && !strings.Contains(msg, "cpu controller") {
		t.Fatalf("reason %q names neither cgroup v1 nor the cpu controller", msg)
	}
	t.Logf("reason: %v", err)
}

// fakeRoot lays out a directory like a cgroup2 directory.
func fakeRoot(t *testing.T, controllers string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"cgroup.controllers": controllers + "\n", "cgroup.subtree_control": "", "cgroup.procs": ""})
	return dir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readTrim(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func TestPlaceRemoveExplicitRoot(t *testing.T) {
	root := fakeRoot(t, "cpuset cpu io memory pids")
	m, err := Detect(root, AllowPlainDir())
	if err != nil {
		t.Fatal(err)
	}
	if m.Parent() != root {
		t.Fatalf("parent %s, want %s", m.Parent(), root)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, "cgroup.subtree_control")); !slices.Contains(strings.Fields(got), "cpu") {
		t.Fatalf("subtree_control %q: cpu not enabled", got)
	}
	if err := m.Setup(); err != nil { // idempotent
		t.Fatal(err)
	}
	for i, nice := range []int{-20, -5, 0, 5, 19} {
		id := "tree-" + strconv.Itoa(i)
		pid := 4000 + i
		if err := m.Place(id, pid, nice); err != nil {
			t.Fatalf("Place(%s, %d, %d): %v", id, pid, nice, err)
		}
		dir := filepath.Join(root, id)
		if got, want := readTrim(t, filepath.Join(dir, "cpu.weight")), strconv.FormatUint(Weight(nice), 10); got != want {
			t.Errorf("nice %d: cpu.weight %q, want %q", nice, got, want)
		}
		if got := readTrim(t, filepath.Join(dir, "cgroup.procs")); got != strconv.Itoa(pid) {
			t.Errorf("nice %d: cgroup.procs %q, want %d", nice, got, pid)
		}
		if err := m.Remove(id); err != nil {
			t.Fatalf("Remove(%s): %v", id, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s still exists after Remove (%v)", dir, err)
		}
		if err := m.Remove(id); err != nil {
			t.Fatalf("second Remove(%s): %v", id, err)
		}
	}
}

func TestPlaceTreeAndSetWeight(t *testing.T) {
	root := fakeRoot(t, "cpu")
	m, err := Detect(root, AllowPlainDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{10, 11, 12} { // a restored init and its children
		if err := m.Place("t", pid, 5); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Fields(readTrim(t, filepath.Join(root, "t", "cgroup.procs"))); !slices.Equal(got, []string{"10", "11", "12"}) {
		t.Fatalf("cgroup.procs %q, want 10 11 12", got)
	}
	if err := m.SetWeight("t", -5); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(root, "t", "cpu.weight")); got != "304" {
		t.Fatalf("cpu.weight after SetWeight(-5) = %q, want 304", got)
	}
	if err := m.SetWeight("missing", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("SetWeight of a missing cgroup: %v, want ErrNotFound", err)
	}
}

func TestBadIDs(t *testing.T) {
	m, err := Detect(fakeRoot(t, "cpu"), AllowPlainDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "..", "../x", "a/b", "cpu.weight", "cgroup.procs", strings.Repeat("x", 200)} {
		if err := m.Place(id, 1, 0); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Place(%q) = %v, want ErrInvalidID", id, err)
		}
		if err := m.Remove(id); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Remove(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

func TestPrune(t *testing.T) {
	root := fakeRoot(t, "cpu")
	m, err := Detect(root, AllowPlainDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b", "c"} {
		if err := m.Place(id, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := m.Prune(func(id string) bool { return id == "b" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{"a", "c"}) {
		t.Fatalf("pruned %q, want a c", removed)
	}
	if _, err := os.Stat(filepath.Join(root, "b", "cpu.weight")); err != nil {
		t.Fatalf("kept cgroup b: %v", err)
	}
	// Interface files of the root itself are not cgroups.
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		t.Fatal(err)
	}
}

func TestDetectExplicitRootRefusals(t *testing.T) {
	tests := []struct {
		name string
		root func(t *testing.T) string
		opts []Option
		want string
	}{
		{"relative", func(*testing.T) string { return "cg" }, nil, "not an absolute path"},
		{"missing", func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }, nil, "not an existing directory"},
		{"not cgroup2", func(t *testing.T) string { return fakeRoot(t, "cpu") }, nil, "not on a cgroup2 file system"},
		{"no cpu controller", func(t *testing.T) string { return fakeRoot(t, "memory pids") }, []Option{AllowPlainDir()}, "cpu controller is not available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Detect(tt.root(t), tt.opts...)
			if m != nil || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Detect = %v, %v; want ErrUnavailable mentioning %q", m, err, tt.want)
			}
		})
	}
}

// fakeHost lays out a cgroup2 mount with a systemd service cgroup and a
// /proc/self/cgroup naming rel.
func fakeHost(t *testing.T, rel string, delegate bool) (mount, service, self string) {
	t.Helper()
	mount = t.TempDir()
	service = filepath.Join(mount, "system.slice", "gpuschedd.service")
	if err := os.MkdirAll(service, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, service, map[string]string{
		"cgroup.controllers": "cpu memory pids\n", "cgroup.subtree_control": "",
		"cgroup.procs": strconv.Itoa(os.Getpid()) + "\n777777\n",
	})
	if delegate {
		if err := unix.Setxattr(service, "trusted.delegate", []byte("1"), 0); err != nil {
			t.Skipf("cannot set the trusted.delegate attribute here (needs root and xattrs): %v", err)
		}
	}
	self = filepath.Join(t.TempDir(), "cgroup")
	writeFiles(t, filepath.Dir(self), map[string]string{"cgroup": "1:name=systemd:" + rel + "\n0::" + rel + "\n"})
	return mount, service, self
}

func TestDelegatedLayout(t *testing.T) {
	mount, service, self := fakeHost(t, "/system.slice/gpuschedd.service", true)
	m, err := Detect("", AllowPlainDir(), withMount(mount), withSelfFile(self))
	if err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(service, ProcsGroup)
	if m.Parent() != procs {
		t.Fatalf("parent %s, want %s", m.Parent(), procs)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	moved := strings.Fields(readTrim(t, filepath.Join(service, DaemonGroup, "cgroup.procs")))
	if !slices.Equal(moved, []string{strconv.Itoa(os.Getpid()), "777777"}) {
		t.Fatalf("daemon leaf holds %q, want this process first, then the service's other processes", moved)
	}
	for _, dir := range []string{service, procs} {
		if got := readTrim(t, filepath.Join(dir, "cgroup.subtree_control")); !slices.Contains(strings.Fields(got), "cpu") {
			t.Fatalf("%s: subtree_control %q, want cpu", dir, got)
		}
	}
	if err := m.Place("job1", 4242, 5); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(procs, "job1", "cpu.weight")); got != "32" {
		t.Fatalf("cpu.weight %q, want 32", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(service, "cgroup.subtree_control")); got != "-cpu" {
		t.Fatalf("after Close the service's subtree_control got %q, want -cpu", got)
	}

	// Started in the leaf already (DelegateSubgroup=daemon): nothing to
	// move, and Close keeps cpu enabled for the next daemon.
	writeFiles(t, filepath.Dir(self), map[string]string{"cgroup": "0::/system.slice/gpuschedd.service/daemon\n"})
	writeFiles(t, service, map[string]string{"cgroup.subtree_control": "cpu\n"})
	m, err = Detect("", AllowPlainDir(), withMount(mount), withSelfFile(self))
	if err != nil {
		t.Fatal(err)
	}
	if m.Parent() != procs || m.self != "" {
		t.Fatalf("in the leaf: parent %s self %q, want %s and no move", m.Parent(), m.self, procs)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(service, "cgroup.subtree_control")); got != "cpu" {
		t.Fatalf("Close from the leaf changed subtree_control to %q", got)
	}
}

// TestDelegatedPids: EnablePids gives the trees' parent a pids.max
// (internal/taskreserve) by enabling pids in the service cgroup, and a
// daemon that moved itself into its leaf hands it back on Close, as it
// does cpu; under an explicit root it changes nothing.
func TestDelegatedPids(t *testing.T) {
	mount, service, self := fakeHost(t, "/system.slice/gpuschedd.service", true)
	m, err := Detect("", AllowPlainDir(), withMount(mount), withSelfFile(self))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	if err := m.EnablePids(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(readTrim(t, filepath.Join(service, "cgroup.subtree_control"))); !slices.Contains(got, "cpu") || !slices.Contains(got, "pids") {
		t.Fatalf("the service's subtree_control %q, want cpu and pids", got)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readTrim(t, filepath.Join(service, "cgroup.subtree_control")); got != "-pids" {
		t.Fatalf("after Close the service's subtree_control got %q last, want -pids", got)
	}

	root := t.TempDir()
	writeFiles(t, root, map[string]string{"cgroup.controllers": "cpu pids\n", "cgroup.subtree_control": "", "cgroup.procs": ""})
	m, err = Detect(root, AllowPlainDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := m.EnablePids(); err != nil || m.pids {
		t.Fatalf("EnablePids under an explicit root: %v, enabled %v; want nothing done", err, m.pids)
	}
}

func TestDelegatedRefusals(t *testing.T) {
	t.Run("not delegated", func(t *testing.T) {
		mount, _, self := fakeHost(t, "/system.slice/gpuschedd.service", false)
		_, err := Detect("", AllowPlainDir(), withMount(mount), withSelfFile(self))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not delegated") {
			t.Fatalf("err = %v, want ErrUnavailable: not delegated", err)
		}
	})
	t.Run("root cgroup", func(t *testing.T) {
		mount, _, self := fakeHost(t, "/", false)
		_, err := Detect("", AllowPlainDir(), withMount(mount), withSelfFile(self))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "root cgroup") {
			t.Fatalf("err = %v, want ErrUnavailable: root cgroup", err)
		}
	})
	t.Run("v1 host", func(t *testing.T) {
		mount, _, self := fakeHost(t, "/system.slice/gpuschedd.service", false)
		_, err := Detect("", withMount(mount), withSelfFile(self))
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "v1") {
			t.Fatalf("err = %v, want ErrUnavailable naming cgroup v1", err)
		}
	})
}
