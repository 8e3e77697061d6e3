package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// fakeCgroupRoot lays out a directory as a cgroup2 directory offering the
// cpu controller; this CI host binds cpu to cgroup v1, so the kernel's
// controller cannot be used here and the files stand in for it.
func fakeCgroupRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for name, data := range map[string]string{"cgroup.controllers": "cpu memory pids\n", "cgroup.subtree_control": "", "cgroup.procs": ""} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// newCgroupHarness runs a daemon whose --cgroup-root is root (a plain
// directory, accepted as one).
func newCgroupHarness(t *testing.T, root string, mods ...func(*config.Config)) *harness {
	t.Helper()
	h := prepareHarness(t, append([]func(*config.Config){func(c *config.Config) { c.CgroupRoot = root }}, mods...)...)
	h.opts = append(h.opts, withCgroupOptions(cgroup.AllowPlainDir()))
	h.start()
	return h
}

// cgroupPIDs lists the pids written to a tree's cgroup.procs.
func cgroupPIDs(t *testing.T, dir string) []int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("cgroup.procs: %q", data)
		}
		pids = append(pids, pid)
	}
	return pids
}

func cgroupWeight(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "cpu.weight"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

func hasCap(t *testing.T, h *harness, capability string) bool {
	t.Helper()
	hello, err := h.client().Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(hello.Capabilities, capability)
}

func TestCPUWeightFollowsNice(t *testing.T) {
	root := fakeCgroupRoot(t)
	stale := filepath.Join(root, "0f1e2d3c-left-by-a-tree-that-ended-unwatched")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	h := newCgroupHarness(t, root)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover cgroup %s survived the daemon's start (%v)", stale, err)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); !strings.Contains(string(data), "cpu") {
		t.Fatalf("cpu not enabled in the root's subtree_control: %q", data)
	}
	if !hasCap(t, h, api.CapCPUWeight) {
		t.Fatalf("hello lacks %q with a usable --cgroup-root", api.CapCPUWeight)
	}

	p, err := h.client().Run(ctxT(t), api.RunParams{Name: "weighted", Cmd: []string{"sleep", "600"}, Dir: "/", Nice: 5,
		Env: map[string]string{"PATH": os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, p.ID)
	if got, want := cgroupWeight(t, dir), strconv.FormatUint(cgroup.Weight(5), 10); got != want || want != "32" {
		t.Errorf("cpu.weight of a nice 5 tree = %q, want %q (32)", got, want)
	}
	if got := cgroupPIDs(t, dir); !slices.Equal(got, []int{p.InitPID}) {
		t.Errorf("cgroup.procs = %v, want the init %d alone (its children are born there)", got, p.InitPID)
	}

	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "weighted"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %s still there after the tree was killed (%v)", dir, err)
	}
}

func TestCPUWeightOffAndUnavailable(t *testing.T) {
	h := newHarness(t) // --cgroup-root none
	if hasCap(t, h, api.CapCPUWeight) {
		t.Fatalf("hello has %q with --cgroup-root none", api.CapCPUWeight)
	}
	if _, err := h.client().Run(ctxT(t), api.RunParams{Name: "plain", Cmd: []string{"true"}, Dir: "/", Nice: 3,
		Env: map[string]string{"PATH": os.Getenv("PATH")}}); err != nil {
		t.Fatalf("run with nice and no cgroups: %v", err)
	}
	h.waitExit("plain")

	// A root that does not offer cpu: the daemon runs, with nice alone.
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h2 := newCgroupHarness(t, root)
	if hasCap(t, h2, api.CapCPUWeight) {
		t.Fatalf("hello has %q though the root offers no cpu controller", api.CapCPUWeight)
	}
	if !strings.Contains(h2.d.cpu.why, "cpu controller") {
		t.Fatalf("reason %q does not name the missing cpu controller", h2.d.cpu.why)
	}
}

// newDiskCgroupHarness runs a daemon with CRIU whose --cgroup-root is a
// plain directory (fakeCgroupRoot), returned with it.
func newDiskCgroupHarness(t *testing.T) (*ckptHarness, string) {
	t.Helper()
	criu := testutil.CRIU(t)
	root := fakeCgroupRoot(t)
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.CRIU = criu; c.CgroupRoot = root })
	h.opts = append(h.opts, withCgroupOptions(cgroup.AllowPlainDir()))
	h.begin()
	return h, root
}

// TestCPUWeightAfterRestore checks that a tree CRIU restores (into the
// daemon's own cgroup) is moved into its cgroup again, every process of it.
func TestCPUWeightAfterRestore(t *testing.T) {
	h, root := newDiskCgroupHarness(t)
	c := h.client()
	p, err := c.Run(ctxT(t), api.RunParams{Name: "job", Dir: "/", GPU: &api.GPURef{Index: 0}, Nice: 3,
		Cmd: []string{h.bins.SimJob, "--vram", "64", "--tick", "0.02"}})
	if err != nil {
		t.Fatal(err)
	}
	h.followCount("job", "tick 3", 1)
	dir := filepath.Join(root, p.ID)
	// The dumped tree dies after the hibernate answers, and its cgroup
	// goes with it; a thaw at once restores into a fresh one all the same.
	for _, atOnce := range []bool{false, true} {
		if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"}); err != nil {
			t.Fatal(err)
		}
		if !atOnce {
			waitFor(t, func() bool { _, err := os.Stat(dir); return errors.Is(err, os.ErrNotExist) })
		}
		if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
			t.Fatal(err)
		}
		cur := h.proc("job")
		if got := cgroupPIDs(t, dir); !slices.Contains(got, cur.InitPID) || !slices.Contains(got, cur.PID) {
			t.Fatalf("thaw at once %v: cgroup.procs after the restore = %v, want the restored init %d and command %d", atOnce, got, cur.InitPID, cur.PID)
		}
		if got := cgroupWeight(t, dir); got != strconv.FormatUint(cgroup.Weight(3), 10) {
			t.Fatalf("thaw at once %v: cpu.weight after the restore = %q, want %d", atOnce, got, cgroup.Weight(3))
		}
	}
	if _, err := c.Kill(ctxT(t), api.KillParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %s still there after kill (%v)", dir, err)
	}
}

// TestThawHandsOverDumpedTreesCgroup thaws a process while the tree it
// was dumped from cannot die yet (its init held in a frozen cgroup v1
// freezer): the thaw does not wait for that death (it would wait
// reapTimeout, 10 s), and when the old tree does end, its watcher leaves
// the cgroup the restored tree joined in the meantime.
func TestThawHandsOverDumpedTreesCgroup(t *testing.T) {
	h, root := newDiskCgroupHarness(t)
	h.memJob("job", 64, 1)
	h.freeze("job")
	rec, _ := h.record("job")
	img, err := h.d.dumpImage(ctxT(t), rec, hibernateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	release := holdInFreezer(t, rec.InitPID)
	if _, err := h.d.finishDump(img, hibernateOpts{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), reapTimeout-time.Second)
	defer cancel()
	if _, err := h.client().Thaw(ctx, api.ThawParams{Name: "job"}); err != nil {
		t.Fatalf("thaw while the dumped tree is still there: %v", err)
	}
	if !procfs.Alive(rec.InitPID, rec.InitStart) {
		t.Fatal("the dumped tree died before the thaw answered, though its init cannot die yet")
	}
	cur := h.proc("job")
	dir := filepath.Join(root, rec.ID)
	release()
	<-img.rt.exited
	if got := cgroupPIDs(t, dir); !slices.Contains(got, cur.InitPID) || !slices.Contains(got, cur.PID) {
		t.Fatalf("once the dumped tree ended, cgroup.procs = %v, want the restored init %d and command %d", got, cur.InitPID, cur.PID)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %s still there after kill (%v)", dir, err)
	}
}

// TestNiceOnEveryThread checks that run --nice reaches every thread of a
// multi-threaded command (Linux nice is per thread), and of its init.
func TestNiceOnEveryThread(t *testing.T) {
	h := newHarness(t)
	p, err := h.client().Run(ctxT(t), api.RunParams{Name: "threads", Dir: "/", Nice: 7, Cmd: []string{h.bins.SimJob, "--tick", "0.01"}})
	if err != nil {
		t.Fatal(err)
	}
	// The Go runtime starts its threads (sysmon, GC workers, ...) soon
	// after exec; wait for a few.
	deadline := time.Now().Add(10 * time.Second)
	for len(threadNices(t, p.PID)) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("pid %d has fewer than 3 threads: %v", p.PID, threadNices(t, p.PID))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, pid := range []int{p.InitPID, p.PID} {
		for tid, nice := range threadNices(t, pid) {
			if nice != 7 {
				t.Errorf("pid %d thread %d: nice %d, want 7", pid, tid, nice)
			}
		}
	}
}

// threadNices reads the nice value (field 19 of stat) of each thread of pid.
func threadNices(t *testing.T, pid int) map[int]int {
	t.Helper()
	task := filepath.Join("/proc", strconv.Itoa(pid), "task")
	ents, err := os.ReadDir(task)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		data, err := os.ReadFile(filepath.Join(task, e.Name(), "stat"))
		if err != nil {
			continue // the thread ended
		}
		// Fields after the command name, which may hold spaces: the
		// first is field 3 (state), so field 19 is index 16.
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		nice, err := strconv.Atoi(f[16])
		if err != nil {
			t.Fatalf("%s/%s/stat: %q", task, e.Name(), data)
		}
		out[tid] = nice
	}
	return out
}

// TestCPUWeightReadopted checks that a restarted daemon weighs the live
// trees it re-adopts again, and places those that had no cgroup yet.
func TestCPUWeightReadopted(t *testing.T) {
	root := fakeCgroupRoot(t)
	h := prepareHarness(t) // first without cgroups
	h.start()
	env := map[string]string{"PATH": os.Getenv("PATH")}
	before, err := h.client().Run(ctxT(t), api.RunParams{Name: "before", Cmd: []string{"sh", "-c", "sleep 600 & wait"}, Dir: "/", Nice: 5, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	h.stop()

	h.cfg.CgroupRoot = root
	h.opts = append(h.opts, withCgroupOptions(cgroup.AllowPlainDir()))
	h.start()
	dir := filepath.Join(root, before.ID)
	if got := cgroupWeight(t, dir); got != "32" {
		t.Errorf("cpu.weight of a re-adopted nice 5 tree = %q, want 32", got)
	}
	got := cgroupPIDs(t, dir)
	if len(got) < 3 || got[0] != before.InitPID || !slices.Contains(got, before.PID) {
		t.Errorf("cgroup.procs of the re-adopted tree = %v, want its init %d first, its command %d and the sleep", got, before.InitPID, before.PID)
	}

	// The next daemon finds the cgroup and sets its weight again.
	if err := os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.start()
	if got := cgroupWeight(t, dir); got != "32" {
		t.Errorf("cpu.weight after a second restart = %q, want 32 again", got)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "before"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cgroup %s still there after kill (%v)", dir, err)
	}
}
