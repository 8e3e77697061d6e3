package daemon

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// Each failure point of the cuda-checkpoint driver, injected into the fake
// tool (reached through the CLI driver, and through the libcuda helper and
// the fake library): the call fails with the right code, and the process
// ends in the state the driver's own state query shows, from which a retry
// resumes.

var faultDrivers = []string{config.DriverCLI, config.DriverAPI}

func TestFreezeCheckpointFailureRollsBack(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 1000, 500)
			pids := h.cudaPIDs("a")
			h.faults(fmt.Sprintf(`{"checkpoint": {"error": "CUDA_ERROR_UNKNOWN", "pids": [%d]}}`, pids[1]))
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
			if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_UNKNOWN") || !strings.Contains(err.Error(), "now running") {
				t.Fatalf("freeze error %v; want the tool's words and the outcome", err)
			}
			p := h.proc("a")
			if p.State != api.StateRunning || p.Tier != api.TierGPU || !strings.Contains(p.Error, "CUDA_ERROR_UNKNOWN") {
				t.Fatalf("after rollback: %+v", p)
			}
			if h.used(0) != 1500 || !allEqual(h.cudaStates("a"), "running") || h.stopped("a") {
				t.Fatalf("after rollback: GPU 0 used %d, driver states %v", h.used(0), h.cudaStates("a"))
			}
			h.faults(`{}`)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if p := h.proc("a"); p.State != api.StateFrozen || p.Error != "" {
				t.Fatalf("after retry: %+v", p)
			}
		})
	}
}

func TestFreezeCheckpointFailureLeavesFailed(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 800)
			h.faults(`{"checkpoint": {"error": "CUDA_ERROR_UNKNOWN", "leave": "failed"}}`)
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
			wantCode(t, err, api.CodeInternal)
			if p := h.proc("a"); p.State != api.StateFailed || !allEqual(h.cudaStates("a"), "failed") {
				t.Fatalf("state %s, driver states %v; want failed", p.State, h.cudaStates("a"))
			}
			if p, err := h.client().Kill(ctxT(t), api.KillParams{Name: "a"}); err != nil || p.State != api.StateExited {
				t.Fatalf("kill of a failed process: %v %+v", err, p)
			}
		})
	}
}

func TestFreezeRollbackUnlockFailureLeavesLocked(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 700)
			h.faults(`{"checkpoint": {"error": "CUDA_ERROR_UNKNOWN", "times": 1}, "unlock": {"error": "CUDA_ERROR_UNKNOWN", "times": 1}}`)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err == nil {
				t.Fatal("freeze succeeded")
			}
			if p := h.proc("a"); p.State != api.StateLocked || !allEqual(h.cudaStates("a"), "locked") {
				t.Fatalf("state %s, driver states %v; want locked", p.State, h.cudaStates("a"))
			}
			// A retried freeze resumes from the lock.
			res, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
			if err != nil {
				t.Fatal(err)
			}
			if res.State != api.StateFrozen || h.used(0) != 0 || !allEqual(h.cudaStates("a"), "checkpointed") {
				t.Fatalf("resumed freeze: %+v, GPU 0 %d", res, h.used(0))
			}
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestThawRestoreOutOfMemoryFailsForGood: after a restore that ran out of
// memory, NVIDIA's driver restores that process never again
// (NVIDIA/cuda-checkpoint#44, modelled by the fakes). The thaw reports the
// process failed with the reason; what it restored is checkpointed again,
// so the GPU holds nothing of it; a freeze is refused; a retried thaw
// fails the same way; kill ends it.
func TestThawRestoreOutOfMemoryFailsForGood(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 1000, 600)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
				t.Fatal(err)
			}
			pids := h.cudaPIDs("a")
			h.faults(fmt.Sprintf(`{"restore": {"error": "CUDA_ERROR_OUT_OF_MEMORY", "times": 1, "pids": [%d]}}`, pids[0]))
			_, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"})
			wantCode(t, err, api.CodeResourceExhausted)
			lost := func(when string) {
				t.Helper()
				p := h.proc("a")
				if p.State != api.StateFailed || p.HostMiB != 1600 || !strings.Contains(p.Error, "cuda-checkpoint#44") {
					t.Fatalf("%s: %s, %d MiB in host RAM, error %q; want failed, naming #44", when, p.State, p.HostMiB, p.Error)
				}
				if h.used(0) != 0 || !allEqual(h.cudaStates("a"), "checkpointed") {
					t.Fatalf("%s: GPU 0 used %d, driver states %v", when, h.used(0), h.cudaStates("a"))
				}
			}
			lost("after the failed restore")
			_, err = h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
			wantCode(t, err, api.CodeConflict)
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err == nil {
				t.Fatal("a retried thaw succeeded")
			}
			lost("after a retried thaw")
			if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "a"}); err != nil {
				t.Fatal(err)
			}
			h.waitExit("a")
		})
	}
}

func TestThawUnlockFailureLeavesLocked(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 900)
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
				t.Fatal(err)
			}
			h.faults(`{"unlock": {"error": "CUDA_ERROR_UNKNOWN", "times": 1}}`)
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err == nil {
				t.Fatal("thaw succeeded")
			}
			if p := h.proc("a"); p.State != api.StateLocked || !allEqual(h.cudaStates("a"), "locked") || h.used(0) != 900 {
				t.Fatalf("state %s, driver states %v, GPU 0 %d; want locked with its memory back", p.State, h.cudaStates("a"), h.used(0))
			}
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if p := h.proc("a"); p.State != api.StateRunning || !allEqual(h.cudaStates("a"), "running") {
				t.Fatalf("after retry: %s %v", p.State, h.cudaStates("a"))
			}
		})
	}
}

func TestFreezeLockTimeout(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("a", 0, 400)
			h.faults(`{"lock": {"delay_ms": 600000}}`)
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a", LockTimeout: api.Duration(100 * time.Millisecond)})
			wantCode(t, err, api.CodeTimeout)
			if p := h.proc("a"); p.State != api.StateRunning || !allEqual(h.cudaStates("a"), "running") || h.used(0) != 400 {
				t.Fatalf("after lock timeout: %s %v", p.State, h.cudaStates("a"))
			}
		})
	}
}

func TestFreezeNotCheckpointable(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("mps", 0, 300)
			h.faults(`{"lock": {"error": "CUDA_ERROR_NOT_SUPPORTED"}}`)
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "mps"})
			wantCode(t, err, api.CodeUnavailable)
			if !strings.Contains(err.Error(), "not checkpointable") {
				t.Fatalf("error %q does not say the process cannot be checkpointed", err)
			}
			if p := h.proc("mps"); p.State != api.StateRunning {
				t.Fatalf("state %s", p.State)
			}
		})
	}
}

// TestHungToolTimesOut: a cuda-checkpoint that never returns is killed at
// the call's deadline, and the freeze rolls back.
func TestHungToolTimesOut(t *testing.T) {
	h := newCkptHarness(t, config.DriverCLI, func(c *config.Config) { c.CheckpointTimeout = time.Second })
	h.jobs("a", 0, 400)
	h.faults(`{"checkpoint": {"delay_ms": 600000}}`)
	_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a"})
	wantCode(t, err, api.CodeTimeout)
	if p := h.proc("a"); p.State != api.StateRunning || !allEqual(h.cudaStates("a"), "running") {
		t.Fatalf("after hung checkpoint: %s %v", p.State, h.cudaStates("a"))
	}
	if pids := fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, ""); len(pids) > 0 {
		t.Fatalf("fake cuda-checkpoint still running: %v", pids)
	}
}

// TestStuckFreezeBlocksNothingElse: while one freeze waits in a slow lock,
// status answers (showing it freezing) and another process freezes.
func TestStuckFreezeBlocksNothingElse(t *testing.T) {
	for _, driver := range faultDrivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.jobs("slow", 0, 500)
			h.jobs("quick", 1, 500)
			h.faults(fmt.Sprintf(`{"lock": {"delay_ms": 600000, "pids": [%d]}}`, h.cudaPIDs("slow")[0]))
			done := make(chan error, 1)
			go func() {
				_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "slow", LockTimeout: api.Duration(time.Minute)})
				done <- err
			}()
			waitFor(t, func() bool { return len(fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "lock")) > 0 })
			if p := h.proc("slow"); p.State != api.StateFreezing {
				t.Fatalf("slow is %s during its lock", p.State)
			}
			if _, err := h.client().Status(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "quick"}); err != nil {
				t.Fatal(err)
			}
			if p := h.proc("slow"); p.State != api.StateFreezing {
				t.Fatalf("slow is %s; its lock is still stuck", p.State)
			}
			// The tool dies: the freeze fails and the process runs on.
			for _, pid := range fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "lock") {
				unix.Kill(pid, unix.SIGKILL)
			}
			if err := <-done; err == nil {
				t.Fatal("freeze succeeded after its tool was killed")
			}
			if p := h.proc("slow"); p.State != api.StateRunning {
				t.Fatalf("slow is %s after its lock failed", p.State)
			}
		})
	}
}

// fakeToolPIDs lists running fake cuda-checkpoint processes, those whose
// command line holds arg when it is set.
func fakeToolPIDs(t *testing.T, fake, arg string) []int {
	t.Helper()
	return procsWhere(t, func(pid int) bool {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != fake {
			return false
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		return arg == "" || strings.Contains(string(cmdline), "\x00"+arg+"\x00")
	})
}

// TestCrashDuringFreezeSettles kills -9 the daemon (a real gpuschedd
// process) while a freeze waits in a slow lock: the restarted daemon asks
// the driver where the process is and records that, and a process that was
// frozen before the crash stays frozen and thaws.
func TestCrashDuringFreezeSettles(t *testing.T) {
	h := prepareCkpt(t, config.DriverCLI)
	first := h.startBinary()
	reg, err := simgpu.Open(h.cfg.SimDir)
	if err != nil {
		t.Fatal(err)
	}
	h.reg = reg
	h.jobs("cold", 1, 600)
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "cold"}); err != nil {
		t.Fatal(err)
	}
	h.jobs("hot", 0, 500)
	h.faults(`{"lock": {"delay_ms": 600000}}`)
	go h.client().Freeze(ctxT(t), api.FreezeParams{Name: "hot", LockTimeout: api.Duration(time.Hour)})
	waitFor(t, func() bool { return len(fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "lock")) > 0 })
	if p := h.proc("hot"); p.State != api.StateFreezing {
		t.Fatalf("hot is %s during its lock", p.State)
	}

	first.cmd.Process.Kill()
	first.cmd.Wait()
	waitFor(t, func() bool { return len(fakeToolPIDs(t, h.bins.FakeCudaCheckpoint, "")) == 0 })
	h.faults(`{}`)
	h.startBinary()

	hot := h.proc("hot")
	if hot.State != api.StateRunning || !strings.Contains(hot.Error, "restarted during a freeze") || !allEqual(h.cudaStates("hot"), "running") {
		t.Fatalf("hot after restart: %s (%q), driver states %v", hot.State, hot.Error, h.cudaStates("hot"))
	}
	if p := h.proc("cold"); p.State != api.StateFrozen || p.HostMiB != 600 || !h.stopped("cold") {
		t.Fatalf("cold after restart: %+v", p)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "cold"}); err != nil {
		t.Fatal(err)
	}
	if h.used(1) != 600 {
		t.Fatalf("GPU 1 used %d after thaw", h.used(1))
	}
	for _, n := range []string{"hot", "cold"} {
		if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: n}); err != nil {
			t.Fatal(err)
		}
	}
}
