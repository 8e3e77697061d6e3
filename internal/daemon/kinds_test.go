package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// simjobs runs name as a shell tree of simulated GPU jobs on GPU 0, one per
// argument list, and waits until each has allocated.
func (h *ckptHarness) simjobs(name string, args ...string) {
	h.t.Helper()
	var script []string
	for _, a := range args {
		script = append(script, fmt.Sprintf("%s --vram 100 %s &", h.bins.SimJob, a))
	}
	script = append(script, "wait")
	_, err := h.client().Run(ctxT(h.t), api.RunParams{Name: name, Dir: "/", GPU: &api.GPURef{Index: 0},
		Cmd: []string{"sh", "-c", strings.Join(script, " ")}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		h.t.Fatalf("run %s: %v", name, err)
	}
	h.followCount(name, "simjob: allocated", len(args))
	h.refresh()
}

// wantUntouched checks that a refused or rolled back freeze left name
// running, with every CUDA process running and its memory on the GPU.
func (h *ckptHarness) wantUntouched(name string, mib uint64) {
	h.t.Helper()
	p := h.proc(name)
	if p.State != api.StateRunning || h.used(0) != mib || !allEqual(h.cudaStates(name), "running") {
		h.t.Fatalf("after the freeze: %s is %s, GPU 0 holds %d MiB (want %d), CUDA states %v",
			name, p.State, h.used(0), mib, h.cudaStates(name))
	}
}

// TestFreezeRefusesNCCLRanks: two ranks of one NCCL communicator (they
// map an NCCL shared-memory segment) are refused up front, untouched;
// without the refusal the second lock would hang (NVIDIA/cuda-checkpoint#30).
func TestFreezeRefusesNCCLRanks(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.simjobs("ranks", "--nccl job", "--nccl job")
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "ranks"})
			wantCode(t, err, api.CodeUnavailable)
			if msg := err.Error(); !strings.Contains(msg, "/dev/shm/nccl-") || !strings.Contains(msg, "NVIDIA/cuda-checkpoint#30") {
				t.Errorf("refusal %q should name the NCCL segment and #30", msg)
			}
			h.wantUntouched("ranks", 200)
			if p := h.proc("ranks"); p.Error != "" {
				t.Errorf("a refusal recorded an error: %q", p.Error)
			}
		})
	}
}

// TestFreezeNCCLLockTimesOut: ranks whose NCCL use their maps do not show
// (no shared-memory segment) make the second lock wait as the driver
// hangs; the freeze fails at the lock timeout, naming NCCL, and rolls back.
func TestFreezeNCCLLockTimesOut(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.simjobs("ranks", "--nccl job --nccl-shm=false", "--nccl job --nccl-shm=false")
			_, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "ranks", LockTimeout: api.Duration(200 * time.Millisecond)})
			wantCode(t, err, api.CodeTimeout)
			if msg := err.Error(); !strings.Contains(msg, "loads NCCL") || !strings.Contains(msg, "now running") {
				t.Errorf("error %q should name NCCL and say the process runs again", msg)
			}
			h.wantUntouched("ranks", 200)
		})
	}
}

// TestFreezeUVMOnlyExplains: a process that maps the UVM device is frozen
// as any other (the driver may map it in every CUDA process); when its
// checkpoint fails, the error names the mapping as the likely cause.
func TestFreezeUVMOnlyExplains(t *testing.T) {
	h := newCkptHarness(t, config.DriverCLI)
	h.simjobs("managed", "--uvm")
	c := h.client()
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "managed"}); err != nil {
		t.Fatalf("freeze of a process mapping /dev/nvidia-uvm: %v", err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "managed"}); err != nil {
		t.Fatal(err)
	}
	h.faults(`{"checkpoint": {"error": "CUDA_ERROR_NOT_SUPPORTED", "times": 1}}`)
	_, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "managed"})
	if err == nil || !strings.Contains(err.Error(), "/dev/nvidia-uvm") {
		t.Errorf("failed freeze: %v; want it to name the UVM mapping", err)
	}
	h.wantUntouched("managed", 100)
	// A failure with a cause of its own is not blamed on the mapping.
	h.faults(`{"checkpoint": {"error": "CUDA_ERROR_OUT_OF_MEMORY", "times": 1}}`)
	_, err = c.Freeze(ctxT(t), api.FreezeParams{Name: "managed"})
	if err == nil || strings.Contains(err.Error(), "/dev/nvidia-uvm") {
		t.Errorf("freeze out of memory: %v; want it not to name the UVM mapping", err)
	}
	h.wantUntouched("managed", 100)
}

// TestKillRestoredSuspendsFirst: a process whose CUDA state a thaw
// restored is locked and checkpointed before its SIGTERM
// (NVIDIA/cuda-checkpoint#53); one never restored is killed as it runs.
func TestKillRestoredSuspendsFirst(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver)
			h.simjobs("restored", "")
			h.simjobs("fresh", "")
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "restored"}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "restored"}); err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]string{"restored": "checkpointed", "fresh": "running"} {
				p, err := h.client().Kill(ctxT(t), api.KillParams{Name: name})
				if err != nil || p.State != api.StateExited {
					t.Fatalf("kill %s: %+v, %v", name, p, err)
				}
				lines, err := h.client().Logs(ctxT(t), name, -1)
				if err != nil {
					t.Fatal(err)
				}
				if line := "simjob: SIGTERM with CUDA " + want; !slices.Contains(lines, line) {
					t.Errorf("%s: log %q lacks %q", name, lines, line)
				}
			}
		})
	}
}

// TestKillSignalRestoredSuspendsFirst: kill --signal KILL of a restored
// process suspends it first too: the SIGKILL waits until the driver's
// checkpoint (held at a gate) is done, with the process locked and alive
// and recorded freezing.
func TestKillSignalRestoredSuspendsFirst(t *testing.T) {
	h := newCkptHarness(t, config.DriverCLI)
	h.simjobs("restored", "")
	if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "restored"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "restored"}); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(h.dir, "checkpoint-gate")
	h.faults(fmt.Sprintf(`{"checkpoint": {"gate": %q, "times": 1}}`, gate))
	done := make(chan error, 1)
	go func() {
		_, err := h.client().Kill(context.Background(), api.KillParams{Name: "restored", Signal: "KILL"})
		done <- err
	}()
	waitFor(t, func() bool { _, err := os.Stat(gate + ".waiting"); return err == nil })
	if states := h.cudaStates("restored"); len(states) != 1 || states[0] != "locked" {
		t.Fatalf("while the kill's checkpoint waits: CUDA states %v, want the process locked and alive", states)
	}
	// Recorded as a freeze under way: a daemon killed now would settle the
	// process from the driver's state at its next start, not find it
	// running with its CUDA process locked.
	if p := h.proc("restored"); p.State != api.StateFreezing {
		t.Fatalf("while the kill's checkpoint waits: state %s, want %s", p.State, api.StateFreezing)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := h.waitExit("restored"); p.Exit == nil || p.Exit.Signal != "SIGKILL" {
		t.Fatalf("after kill --signal KILL: %+v", p.Exit)
	}
}

// TestMIGGPUExcluded: a GPU in MIG mode is left alone, and gpus and hello
// say why; nothing is started on it.
func TestMIGGPUExcluded(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Sim = "2x4G:mig=1" })
	hello, err := h.client().Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(hello.ExcludedGPUs) != 1 || !strings.HasPrefix(hello.ExcludedGPUs[0], "GPU 1: MIG mode is on") ||
		!strings.Contains(hello.ExcludedGPUs[0], "NVIDIA/cuda-checkpoint#42") {
		t.Errorf("hello excluded_gpus = %q", hello.ExcludedGPUs)
	}
	gpus, err := h.client().GPUs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if g := gpus[1]; g.Healthy || len(g.Unhealthy) != 1 || g.Unhealthy[0] != hello.ExcludedGPUs[0] {
		t.Errorf("GPU 1 = healthy %v, unhealthy %q; want the MIG sentence", g.Healthy, g.Unhealthy)
	}
	if g := gpus[0]; !g.Healthy {
		t.Errorf("GPU 0 unhealthy: %q", g.Unhealthy)
	}

	_, err = h.client().Run(ctxT(t), api.RunParams{Name: "on-mig", Dir: "/", GPU: &api.GPURef{Index: 1}, Cmd: []string{"true"}})
	wantCode(t, err, api.CodeUnavailable)
	if !strings.Contains(err.Error(), "MIG mode is on") {
		t.Errorf("run on the MIG GPU: %v", err)
	}
	p, err := h.client().Run(ctxT(t), api.RunParams{Name: "any", Dir: "/", Cmd: []string{"sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.GPUs) != 1 || p.GPUs[0].Index != 0 {
		t.Errorf("a run naming no GPU got %+v; want GPU 0 only", p.GPUs)
	}
}
