package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestFreezeTakesLateCUDAProcess is a child of the tree that makes its
// first allocation while the freeze is locking the others (the crash test
// found it left running under a frozen record): the freeze goes back for
// it, so that every CUDA process of the tree ends checkpointed, and the
// thaw brings all of them back.
func TestFreezeTakesLateCUDAProcess(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			if err := freezeWithLateProcess(h); err != nil {
				t.Fatalf("freeze: %v", err)
			}
			states := h.cudaStates("a")
			if p := h.proc("a"); p.State != api.StateFrozen || len(states) != 2 || !allEqual(states, "checkpointed") || !h.stopped("a") {
				t.Fatalf("after the freeze: %s, driver states %v, stopped %v; want every CUDA process checkpointed", p.State, states, h.stopped("a"))
			}
			if used := h.used(0); used != 0 {
				t.Fatalf("GPU 0 holds %d MiB of a frozen tree", used)
			}
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
				t.Fatalf("thaw: %v", err)
			}
			if states := h.cudaStates("a"); len(states) != 2 || !allEqual(states, "running") || h.used(0) != 800 {
				t.Fatalf("after the thaw: driver states %v, GPU 0 used %d MiB", states, h.used(0))
			}
			h.waitStopped("a", false)
		})
	}
}

// TestLateCUDAProcessCountsWholeTreeAgainstRAMBudget: the room a freeze
// asks for a late process is the whole tree's, not the late process's
// alone. With 600 MiB of --ram-budget and the disk tier off, the tree's
// first 500 MiB fit and 500 plus the late 300 do not: the freeze is
// refused and rolled back, both processes running with their memory, where
// counting the late 300 alone left 800 MiB frozen past the budget.
func TestLateCUDAProcessCountsWholeTreeAgainstRAMBudget(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver, func(c *config.Config) { c.RAMBudgetMiB, c.CRIU = 600, "none" })
			err := freezeWithLateProcess(h)
			wantCode(t, err, api.CodeResourceExhausted)
			if p := h.proc("a"); p.State != api.StateRunning || h.used(0) != 800 {
				t.Fatalf("after the refused freeze: %s, GPU 0 used %d MiB; want running with 800", p.State, h.used(0))
			}
			if states := h.cudaStates("a"); len(states) != 2 || !allEqual(states, "running") {
				t.Fatalf("after the refused freeze: driver states %v", states)
			}
		})
	}
}

// freezeWithLateProcess runs "a", a tree of two CUDA processes of which the
// second (300 MiB) makes its first allocation while a freeze is locking
// the first (500 MiB), and returns that freeze's error.
func freezeWithLateProcess(h *ckptHarness) error {
	h.t.Helper()
	gate := filepath.Join(h.dir, "lock-gate")
	script := fmt.Sprintf(`%[1]s --vram 500 --tick 0.02 &
(while [ ! -e %[2]s.waiting ]; do sleep 0.01; done; exec %[1]s --vram 300 --tick 0.02) &
wait`, h.bins.SimJob, gate)
	if _, err := h.client().Run(ctxT(h.t), api.RunParams{Name: "a", Dir: "/", GPU: &api.GPURef{Index: 0},
		Cmd: []string{"sh", "-c", script}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}); err != nil {
		h.t.Fatal(err)
	}
	h.followCount("a", "simjob: allocated", 1)
	h.faults(fmt.Sprintf(`{"lock": {"gate": %q, "times": 1}}`, gate))
	done := make(chan error, 1)
	go func() {
		_, err := h.client().Freeze(context.Background(), api.FreezeParams{Name: "a"})
		done <- err
	}()
	h.followCount("a", "simjob: allocated", 2) // the late one, while the lock waits
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		h.t.Fatal(err)
	}
	return <-done
}

// TestInterruptedFreezeSettlesWholeTree is a daemon killed after a freeze
// stopped the tree but before it recorded the stop, with a CUDA process of
// the tree it had not recorded still running: the next daemon finds that
// process from a GPU sample (the process is locked, not frozen), continues
// the whole tree, and a retried freeze and a thaw take every process.
func TestInterruptedFreezeSettlesWholeTree(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	h.jobs("a", 0, 500, 300)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	late := h.cudaPIDs("a")[1]
	h.stop()
	// A restore needs the process's restore thread running: continue it
	// for the restore, and stop it again as the freeze had.
	start, err := procfs.StartTime(late)
	if err != nil {
		t.Fatal(err)
	}
	lateRef := proctable.ProcRef{PID: late, Start: start}
	if err := continueTree([]proctable.ProcRef{lateRef}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.reg.RestoreProcess(context.Background(), late, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.reg.UnlockProcess(late); err != nil {
		t.Fatal(err)
	}
	if err := signalRef(lateRef, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := waitStopped([]proctable.ProcRef{lateRef}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !editRecord(t, h.harness, "a", func(m map[string]any) bool {
		cp := m["checkpoint"].(map[string]any)
		m["state"] = string(api.StateFreezing)
		var kept []any
		for _, p := range cp["procs"].([]any) {
			if fmt.Sprint(p.(map[string]any)["pid"]) != fmt.Sprint(late) {
				kept = append(kept, p)
			}
		}
		cp["procs"] = kept
		delete(cp, "stopped")
		return true
	}) {
		t.Fatal("no record of a")
	}
	h.start()
	if p := h.proc("a"); p.State != api.StateLocked {
		t.Fatalf("after the restart: %s (%s); want locked", p.State, p.Error)
	}
	h.waitStopped("a", false)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatalf("retried freeze: %v", err)
	}
	if states := h.cudaStates("a"); len(states) != 2 || !allEqual(states, "checkpointed") || !h.stopped("a") {
		t.Fatalf("after the retried freeze: driver states %v, stopped %v", states, h.stopped("a"))
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
		t.Fatalf("thaw: %v", err)
	}
	if states := h.cudaStates("a"); len(states) != 2 || !allEqual(states, "running") {
		t.Fatalf("after the thaw: driver states %v", states)
	}
	h.waitStopped("a", false)
}
