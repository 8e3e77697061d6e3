package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// newDiskHarness is a checkpoint harness with real CRIU.
func newDiskHarness(t testing.TB, driver string, mods ...func(*config.Config)) *ckptHarness {
	t.Helper()
	criu := testutil.CRIU(t)
	return newCkptHarness(t, driver, append([]func(*config.Config){func(c *config.Config) { c.CRIU = criu }}, mods...)...)
}

// memJob runs a simulated job holding vram MiB on GPU 0 and hostMiB of
// patterned host memory, ticking a counter, and waits until it is filled.
func (h *ckptHarness) memJob(name string, vram, hostMiB int) {
	h.t.Helper()
	_, err := h.client().Run(ctxT(h.t), api.RunParams{Name: name, Dir: "/", GPU: &api.GPURef{Index: 0},
		Cmd: []string{h.bins.SimJob, "--vram", fmt.Sprint(vram), "--host-mem", fmt.Sprint(hostMiB), "--tick", "0.02"}})
	if err != nil {
		h.t.Fatalf("run %s: %v", name, err)
	}
	h.followCount(name, "simjob: host memory", 1)
	h.followCount(name, "tick 3", 1)
	if h.d != nil {
		h.refresh()
	}
}

// lastTick is the highest "tick N" in name's log.
func (h *ckptHarness) lastTick(name string) int {
	h.t.Helper()
	lines, err := h.client().Logs(ctxT(h.t), name, -1)
	if err != nil {
		h.t.Fatal(err)
	}
	last := 0
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(l, "tick %d", &n); err == nil && n > last {
			last = n
		}
	}
	return last
}

// verifyContinued checks that name's counter went on past from without
// starting over, and that its host memory is intact.
func (h *ckptHarness) verifyContinued(name string, from int) {
	h.t.Helper()
	h.followCount(name, fmt.Sprintf("tick %d", from+2), 1)
	lines, _ := h.client().Logs(ctxT(h.t), name, -1)
	if n := strings.Count(strings.Join(lines, "\n")+"\n", "tick 1\n"); n != 1 {
		h.t.Fatalf("%s: the counter started over (%d times tick 1)", name, n)
	}
	before := strings.Count(strings.Join(lines, "\n"), "host memory verified")
	if _, err := h.client().Kill(ctxT(h.t), api.KillParams{Name: name, Signal: "SIGUSR1"}); err != nil {
		h.t.Fatal(err)
	}
	h.followCount(name, "simjob: host memory verified", before+1)
}

func TestHibernateThawFromDisk(t *testing.T) {
	for _, driver := range []string{config.DriverSim, config.DriverCLI} {
		t.Run(driver, func(t *testing.T) {
			h := newDiskHarness(t, driver)
			c := h.client()
			h.memJob("job", 512, 64)

			hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			if hr.State != api.StateHibernated || hr.Snapshot == "" || hr.Parent != "" || hr.Bytes < 64<<20 || hr.GPUBytes != 512<<20 {
				t.Fatalf("hibernate result %+v", hr)
			}
			p := h.proc("job")
			if p.State != api.StateHibernated || p.Tier != api.TierDisk || p.InitPID != 0 || p.Snapshot != hr.Snapshot {
				t.Fatalf("after hibernate: %+v", p)
			}
			h.refresh()
			if u := h.used(0); u != 0 {
				t.Fatalf("GPU 0 holds %d MiB after hibernate", u)
			}
			snaps, err := c.Snapshots(ctxT(t), api.SnapshotsParams{})
			if err != nil || len(snaps.Snapshots) != 1 || !snaps.Snapshots[0].Holds || snaps.Bytes != hr.Bytes {
				t.Fatalf("snapshots %+v, %v", snaps, err)
			}
			ticks := h.lastTick("job")

			tr, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			if tr.State != api.StateRunning || tr.Snapshot != hr.Snapshot || tr.MS["criu_restore"] <= 0 {
				t.Fatalf("thaw result %+v", tr)
			}
			h.refresh()
			if u := h.used(0); u != 512 {
				t.Fatalf("GPU 0 holds %d MiB after thaw, want 512", u)
			}
			if got := h.cudaStates("job"); !allEqual(got, "running") {
				t.Fatalf("CUDA states after thaw %v", got)
			}
			h.verifyContinued("job", ticks)

			// A repeat hibernate writes only what changed.
			hr2, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			if hr2.Parent != hr.Snapshot || hr2.Written*10 > hr.Written || hr2.Reused == 0 {
				t.Fatalf("repeat hibernate %+v, first %+v: want parent %s and < 10%% written", hr2, hr, hr.Snapshot)
			}
			ticks = h.lastTick("job")
			if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
				t.Fatal(err)
			}
			h.verifyContinued("job", ticks)

			// A full image retires the chain it replaces: gone from the
			// list and from its paths when the hibernate answers.
			hr3, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job", Full: true})
			if err != nil {
				t.Fatal(err)
			}
			snaps, err = c.Snapshots(ctxT(t), api.SnapshotsParams{})
			if err != nil || len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != hr3.Snapshot || hr3.Parent != "" {
				t.Fatalf("after a full hibernate %+v: snapshots %+v, %v", hr3, snaps, err)
			}
			for _, id := range []string{hr.Snapshot, hr2.Snapshot} {
				if _, err := os.Stat(filepath.Join(h.cfg.Snapshots(), id)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("replaced snapshot %s: %v", id, err)
				}
			}
			ticks = h.lastTick("job")
			if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
				t.Fatal(err)
			}
			h.verifyContinued("job", ticks)
			if _, err := c.Kill(ctxT(t), api.KillParams{Name: "job"}); err != nil {
				t.Fatal(err)
			}
			if snaps, _ := c.Snapshots(ctxT(t), api.SnapshotsParams{}); len(snaps.Snapshots) != 0 {
				t.Fatalf("snapshots left after the process ended: %+v", snaps.Snapshots)
			}
		})
	}
}

// TestDeleteSnapshot: the snapshot a thawed process keeps (the parent of
// its next image) is deleted on request, gone from the list and from its
// path when the call answers, and the process's next image is full; a
// snapshot that holds a hibernated process is refused, and stays.
func TestDeleteSnapshot(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("job", 0, 16)
	hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.DeleteSnapshot(ctxT(t), hr.Snapshot)
	wantCode(t, err, api.CodeConflict)
	ticks := h.lastTick("job")
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
	if _, err := c.DeleteSnapshot(ctxT(t), hr.Snapshot); err != nil {
		t.Fatal(err)
	}
	if snaps, err := c.Snapshots(ctxT(t), api.SnapshotsParams{}); err != nil || len(snaps.Snapshots) != 0 {
		t.Fatalf("snapshots after the delete: %+v, %v", snaps, err)
	}
	if _, err := os.Stat(filepath.Join(h.cfg.Snapshots(), hr.Snapshot)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the deleted snapshot's directory: %v", err)
	}
	hr2, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	if err != nil || hr2.Parent != "" {
		t.Fatalf("the hibernate after the delete: %+v, %v; want a full image", hr2, err)
	}
	ticks = h.lastTick("job")
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}

func TestForkCopiesRunIndependently(t *testing.T) {
	h := newDiskHarness(t, config.DriverCLI)
	c := h.client()
	// A command longer than a record keeps (the rest a shell comment):
	// each copy's record has it whole.
	cmd := []string{"sh", "-c", "exec " + h.bins.SimJob + " --vram 256 --host-mem 16 --tick 0.02 # " + strings.Repeat("x", 2*proctable.KeptCmdBytes)}
	if _, err := c.Run(ctxT(t), api.RunParams{Name: "src", Dir: "/", GPU: &api.GPURef{Index: 0}, Cmd: cmd}); err != nil {
		t.Fatal(err)
	}
	h.followCount("src", "simjob: host memory", 1)
	h.followCount("src", "tick 3", 1)
	h.refresh()
	res, err := c.Fork(ctxT(t), api.ForkParams{Name: "src", Copies: 3, GPUs: []api.GPURef{{Index: 1}, {Index: 1}, {Index: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Copies) != 3 {
		t.Fatalf("fork result %+v", res)
	}
	for i, cp := range res.Copies {
		want := fmt.Sprintf("src-%d", i+1)
		if cp.Name != want || cp.State != api.StateRunning || cp.Log == h.proc("src").Log {
			t.Fatalf("copy %d: %+v", i, cp)
		}
		if whole := h.proc(want); !slices.Equal(whole.Cmd, cmd) {
			t.Fatalf("copy %d's command: %d arguments, truncated %v; want the source's whole", i, len(whole.Cmd), whole.CmdTruncated)
		}
	}
	if p := h.proc("src"); p.State != api.StateRunning {
		t.Fatalf("source after fork: %s", p.State)
	}
	if ents, err := os.ReadDir(h.cfg.Snapshots()); err != nil || len(ents) != 1 || ents[0].Name() != checkpoint.TrashDir {
		t.Fatalf("the snapshot directory after the fork holds %v (%v); want only the trash its image went to", ents, err)
	}
	h.refresh()
	if u0, u1 := h.used(0), h.used(1); u0 != 512 || u1 != 512 {
		t.Fatalf("GPU use after fork: %d, %d MiB; want 512, 512 (source and copy 3 on GPU 0, copies 1-2 on GPU 1)", u0, u1)
	}
	// Each copy ticks in its own log, from the source's count on, with its
	// memory intact; ending one leaves the others running.
	for _, name := range []string{"src-1", "src-2", "src-3"} {
		h.followCount(name, "tick ", 2)
		lines, _ := c.Logs(ctxT(t), name, -1)
		if strings.Contains(strings.Join(lines, "\n"), "simjob: pid=") {
			t.Fatalf("%s's log holds the source's start lines: %q", name, lines)
		}
		if _, err := c.Kill(ctxT(t), api.KillParams{Name: name, Signal: "SIGUSR1"}); err != nil {
			t.Fatal(err)
		}
		h.followCount(name, "simjob: host memory verified", 1)
	}
	if _, err := c.Kill(ctxT(t), api.KillParams{Name: "src-1"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"src", "src-2", "src-3"} {
		if p := h.proc(name); p.State != api.StateRunning {
			t.Fatalf("%s is %s after src-1 was killed", name, p.State)
		}
	}
	// Nothing is left of the fork's image.
	if snaps, _ := c.Snapshots(ctxT(t), api.SnapshotsParams{}); len(snaps.Snapshots) != 0 || snaps.Bytes != 0 {
		t.Fatalf("snapshots after fork: %+v", snaps)
	}
}

func TestForkRefusesBadInput(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("src", 64, 1)
	for _, tc := range []struct {
		p    api.ForkParams
		code api.Code
	}{
		{api.ForkParams{Name: "src", Copies: 0}, api.CodeInvalidArgument},
		{api.ForkParams{Name: "src", Copies: 65}, api.CodeInvalidArgument},
		{api.ForkParams{Name: "src", Copies: 2, GPUs: []api.GPURef{{Index: 1}}}, api.CodeInvalidArgument},
		{api.ForkParams{Name: "src", Copies: 1, GPUs: []api.GPURef{{Index: 7}}}, api.CodeInvalidArgument},
		{api.ForkParams{Name: "nope", Copies: 1}, api.CodeNotFound},
	} {
		_, err := c.Fork(ctxT(t), tc.p)
		wantCode(t, err, tc.code)
	}
	h.run("src-1", "sleep", "60")
	_, err := c.Fork(ctxT(t), api.ForkParams{Name: "src", Copies: 1})
	wantCode(t, err, api.CodeExists)
	if p := h.proc("src"); p.State != api.StateRunning {
		t.Fatalf("source after refused forks: %s", p.State)
	}
}

// TestRestoredJobKeepsOthersMemory restores a job mid-ramp: inside its
// restored tree (a new time namespace, where /proc shows start times
// shifted) it goes on allocating, and must neither lose its own simulated
// memory nor take another process's records for dead.
func TestRestoredJobKeepsOthersMemory(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.jobs("other", 1, 300)
	_, err := c.Run(ctxT(t), api.RunParams{Name: "late", Dir: "/", GPU: &api.GPURef{Index: 0},
		Cmd: []string{h.bins.SimJob, "--vram", "200", "--ramp", "2", "--tick", "0.02"}})
	if err != nil {
		t.Fatal(err)
	}
	h.followCount("late", "tick 2", 1)
	if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "late"}); err != nil {
		t.Fatal(err)
	}
	h.followCount("late", "simjob: allocated 200 MiB", 1)
	if u0, u1 := h.used(0), h.used(1); u0 != 200 || u1 != 300 {
		t.Fatalf("GPU use after the restored job ramped: %d, %d MiB; want 200, 300", u0, u1)
	}
}

// TestRestartAfterDumpKeepsImage is a daemon stopped after CRIU imaged a
// tree and left it stopped, before the hibernate killed it: the next
// daemon keeps the complete image, ends the stopped tree, and the process
// thaws from the image with its memory intact.
func TestRestartAfterDumpKeepsImage(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	h.memJob("job", 256, 16)
	h.freeze("job")
	rec, _ := h.record("job")
	if len(rec.Checkpoint.Stopped) == 0 {
		t.Fatal("frozen tree not stopped (--freeze-stop)")
	}
	ticks := h.lastTick("job")
	img, err := h.d.dumpImage(ctxT(t), rec, hibernateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	// CRIU's --leave-stopped sends SIGSTOP just before PTRACE_DETACH
	// (compel_resume_task_sig, compel/src/lib/infect.c): the tree is
	// stopped moments after criu exits, not necessarily when it does.
	if err := waitStopped([]proctable.ProcRef{{PID: rec.InitPID, Start: rec.InitStart}}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if st, err := procfs.ReadStat(rec.InitPID); err != nil || st.State != 'T' {
		t.Fatalf("the dumped init: %+v, %v; want it alive and stopped", st, err)
	}
	h.start()
	p := h.proc("job")
	if p.State != api.StateHibernated || p.Snapshot != img.meta.ID || p.InitPID != 0 || !strings.Contains(p.Error, "image was complete") {
		t.Fatalf("after the restart: %+v", p)
	}
	// The sweep of untracked trees killed the dumped one; it is this test
	// process's child (the first daemon ran in it).
	var ws unix.WaitStatus
	if _, err := unix.Wait4(rec.InitPID, &ws, 0, nil); err != nil || !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Fatalf("the dumped init: %v, %v; want it killed", ws, err)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}

// TestDumpedTreeDiesAfterTheAnswer holds a dumped tree's init in a frozen
// cgroup v1 freezer, where SIGKILL cannot end it: a hibernate
// answers while the tree is still there, and an eviction's (room asked
// for) only once the tree has died.
func TestDumpedTreeDiesAfterTheAnswer(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	dumped := func(name string) (proctable.Record, dumpedTree, func()) {
		h.memJob(name, 64, 1)
		h.freeze(name)
		rec, _ := h.record(name)
		img, err := h.d.dumpImage(ctxT(t), rec, hibernateOpts{})
		if err != nil {
			t.Fatal(err)
		}
		return rec, img, holdInFreezer(t, rec.InitPID)
	}

	rec, img, thaw := dumped("asked")
	if _, err := h.d.finishDump(img, hibernateOpts{}); err != nil {
		t.Fatal(err)
	}
	if !procfs.Alive(rec.InitPID, rec.InitStart) {
		t.Fatal("the dumped tree died before the hibernate answered, though its init cannot die yet")
	}
	thaw()
	<-img.rt.exited

	rec, img, thaw = dumped("evicted")
	alive := make(chan bool, 1)
	go func() {
		_, err := h.d.finishDump(img, hibernateOpts{freed: true})
		alive <- err == nil && procfs.Alive(rec.InitPID, rec.InitStart)
	}()
	waitFor(t, func() bool { r, _ := h.record("evicted"); return r.State == api.StateHibernated })
	thaw()
	if <-alive {
		t.Fatal("an eviction's hibernate answered before the tree it dumped had died")
	}
}

// holdInFreezer freezes process pid in a cgroup v1 freezer of its own, where it
// cannot die until thawed; the function it returns thaws it.
func holdInFreezer(t *testing.T, pid int) func() {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/freezer", fmt.Sprintf("gpusched-test-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("no cgroup v1 freezer: %v", err)
	}
	write := func(file, v string) {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("cgroup.procs", fmt.Sprint(pid)) // every thread
	write("freezer.state", "FROZEN")
	waitFor(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "freezer.state"))
		return strings.TrimSpace(string(b)) == "FROZEN"
	})
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			write("freezer.state", "THAWED")
		}
	}
	t.Cleanup(func() {
		thaw()
		waitFor(t, func() bool { err := os.Remove(dir); return err == nil || errors.Is(err, fs.ErrNotExist) })
	})
	return thaw
}

// TestCommitFailureKeepsProcessFrozen: a snapshot that cannot be made
// durable after CRIU imaged the tree (its metadata cannot be written)
// fails the hibernate with nothing lost: the tree was not ended, the
// process is frozen in RAM again, no snapshot is listed, and it thaws with
// its memory intact.
func TestCommitFailureKeepsProcessFrozen(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	h.memJob("job", 64, 16)
	h.freeze("job")
	rec, _ := h.record("job")
	ticks := h.lastTick("job")
	img, err := h.d.dumpImage(ctxT(t), rec, hibernateOpts{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(h.d.snaps.Path(img.meta.ID), "meta.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.finishDump(img, hibernateOpts{}); err == nil || !strings.Contains(err.Error(), "stays frozen in RAM") {
		t.Fatalf("finishDump: %v, want a failure that keeps the process frozen", err)
	}
	if p := h.proc("job"); p.State != api.StateFrozen || p.InitPID != rec.InitPID || !procfs.Alive(rec.InitPID, rec.InitStart) {
		t.Fatalf("after the failed commit: %+v; want it frozen, its tree alive", p)
	}
	if snaps, err := h.client().Snapshots(ctxT(t), api.SnapshotsParams{}); err != nil || len(snaps.Snapshots) != 0 {
		t.Fatalf("snapshots after the failed commit: %+v, %v", snaps, err)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}
