package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestFillerHelperKilledIsRestarted: the memory filler's helper killed
// with SIGKILL loses its memory; the daemon starts a new helper to the same
// target, reports it (new pid, no error, the target held), keeps its
// record (a restarted daemon re-adopts the new helper), and the reservation
// is whole again.
func TestFillerHelperKilledIsRestarted(t *testing.T) {
	h := newQueueHarness(t, fillGPU)
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 16384}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 16384)
	start, err := procfs.StartTime(f.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(f.PID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its memory goes with it (the simulated driver frees a dead
	// process's memory, as the real one does).
	waitFor(t, func() bool { return !procfs.Alive(f.PID, start) })

	var g api.Filler
	waitFor(t, func() bool { g = h.filler(0); return g.PID != f.PID && g.PID > 0 })
	h.waitSettled(0, 16384)
	h.refresh() // what the filler reports held is sampled
	g = h.filler(0)
	newStart, err := procfs.StartTime(g.PID)
	if err != nil {
		t.Fatalf("the new helper %d is not running: %v", g.PID, err)
	}
	if g.TargetMiB != 16384 || g.Error != "" || g.HeldMiB+fillChunk <= 16384 || g.UID != f.UID {
		t.Fatalf("filler after its helper was killed: %+v; want the same target held, no error", g)
	}
	h.stop()
	h.begin()
	if a := h.filler(0); a.PID != g.PID || a.TargetMiB != 16384 || !procfs.Alive(g.PID, newStart) {
		t.Fatalf("after a daemon restart: %+v; want the new helper %d re-adopted", a, g.PID)
	}
	h.waitSettled(0, 16384)
}

// helperPIDs lists the checkpoint driver's helper processes this test
// process started (the in-process daemon's).
func helperPIDs(t *testing.T) []int {
	t.Helper()
	return procsWhere(t, func(pid int) bool {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.HasPrefix(string(cmdline), checkpoint.HelperArgv0+"\x00") {
			return false
		}
		st, err := procfs.ReadStat(pid)
		return err == nil && st.PPID == os.Getpid() && !st.Exited()
	})
}

// oneHelper returns the driver's only helper process.
func oneHelper(t *testing.T) int {
	t.Helper()
	var pids []int
	waitFor(t, func() bool { pids = helperPIDs(t); return len(pids) == 1 })
	return pids[0]
}

// TestCudaHelperKilled: the driver-API checkpoint helper killed with
// SIGKILL while idle is started again by the next freeze, which succeeds;
// killed during a freeze (in its checkpoint call), the freeze fails with an
// error naming the helper, the process is rolled back to running (the
// driver agrees), and the next freeze and thaw work through a new helper.
func TestCudaHelperKilled(t *testing.T) {
	h := newCkptHarness(t, config.DriverAPI)
	c := h.client()
	h.jobs("a", 0, 300)

	idle := oneHelper(t)
	if err := unix.Kill(idle, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return len(helperPIDs(t)) == 0 })
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatalf("freeze after the idle helper was killed: %v", err)
	}
	if p := h.proc("a"); p.State != api.StateFrozen || !allEqual(h.cudaStates("a"), "checkpointed") {
		t.Fatalf("a after freeze: %s, driver %v", p.State, h.cudaStates("a"))
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if second := oneHelper(t); second == idle {
		t.Fatalf("helper %d was not replaced", second)
	}

	// Killed in the middle of a checkpoint.
	h.faults(`{"checkpoint": {"delay_ms": 600000}}`)
	done := make(chan error, 1)
	go func() {
		_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
		done <- err
	}()
	waitFor(t, func() bool { return len(fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "checkpoint")) > 0 })
	h.faults(`{}`)
	busy := oneHelper(t)
	// The driver call dies with the helper (the fake library runs it as a
	// child; in a real helper it is in-process). Only that call's tool:
	// listed after the kill, the list could hold the tool of the freeze
	// retried on a new helper, whose death that helper would report as
	// the driver's own failure.
	calls := fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "checkpoint")
	if err := unix.Kill(busy, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, pid := range calls {
		unix.Kill(pid, unix.SIGKILL)
	}
	err := <-done
	if err == nil {
		// The request the helper died on had not reached it: it went to a
		// new helper, and the freeze completed there.
		if p := h.proc("a"); p.State != api.StateFrozen || !allEqual(h.cudaStates("a"), "checkpointed") {
			t.Fatalf("a after a freeze that succeeded on a new helper: %s, driver %v", p.State, h.cudaStates("a"))
		}
		if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !strings.Contains(err.Error(), "cuda helper") {
		t.Fatalf("freeze with its helper killed: %v; want an error naming the cuda helper", err)
	}
	p := h.proc("a")
	if p.State != api.StateRunning || !allEqual(h.cudaStates("a"), "running") || h.stopped("a") {
		t.Fatalf("a after its freeze lost the helper: %s (%q), driver %v; want rolled back to running", p.State, p.Error, h.cudaStates("a"))
	}
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatalf("freeze through a new helper: %v", err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if h.used(0) != 300 {
		t.Errorf("GPU 0 holds %d MiB after thaw; want 300", h.used(0))
	}
}

// TestInitKilledEndsTree: SIGKILL to a managed process's own PID-namespace
// init ends its whole tree: the process is reported exited by SIGKILL, no
// process of the tree is left, its GPU memory is freed, and the record
// stays exited across a daemon restart.
func TestInitKilledEndsTree(t *testing.T) {
	h := newQueueHarness(t, "2x4G")
	p := h.jobs("t", 0, 300, 200)
	tree, err := procfs.ScanTree()
	if err != nil {
		t.Fatal(err)
	}
	type ident struct {
		pid   int
		start uint64
	}
	var members []ident
	for _, pid := range append(tree.Descendants(p.InitPID), p.InitPID) {
		if st, err := procfs.StartTime(pid); err == nil {
			members = append(members, ident{pid, st})
		}
	}
	if len(members) < 4 { // init, sh, two simjobs
		t.Fatalf("tree of t: %v", members)
	}
	if err := unix.Kill(p.InitPID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	end := h.waitExit("t")
	if end.State != api.StateExited || end.Exit == nil || end.Exit.Signal != "SIGKILL" || end.Exit.Code != nil {
		t.Fatalf("t after its init was killed: %+v (exit %+v); want exited by SIGKILL", end, end.Exit)
	}
	for _, m := range members {
		if procfs.Alive(m.pid, m.start) {
			t.Errorf("pid %d of the tree is still alive", m.pid)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for h.used(0) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("GPU 0 still holds %d MiB of the dead tree", h.used(0))
		}
		time.Sleep(2 * time.Millisecond)
	}
	h.stop()
	h.begin()
	if again := h.proc("t"); again.State != api.StateExited || again.Exit == nil || again.Exit.Signal != "SIGKILL" {
		t.Fatalf("t after a daemon restart: %+v", again)
	}
}
