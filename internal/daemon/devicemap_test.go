package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestMigrateOneOfTwoGPUs moves one GPU of a process on two: the restore
// must name both (the one that stays as an identity pair), since NVIDIA's
// driver refuses a map without every checkpointed GPU
// (NVIDIA/cuda-checkpoint#35), as the fakes do.
func TestMigrateOneOfTwoGPUs(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver, func(c *config.Config) { c.Sim = "3x4G" })
			_, err := h.client().Run(ctxT(t), api.RunParams{Name: "a", Dir: "/", GPUs: []api.GPURef{{Index: 0}, {Index: 1}},
				Cmd: []string{h.bins.SimJob, "--vram", "700", "--tick", "0.02"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
			if err != nil {
				t.Fatal(err)
			}
			h.followCount("a", "simjob: allocated", 2)
			h.refresh()
			res, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPUs: []api.GPURef{{Index: 0}, {Index: 2}}})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{simgpu.DeviceUUID(0), simgpu.DeviceUUID(2)}
			if res.State != api.StateRunning || strings.Join(res.GPUs, ",") != strings.Join(want, ",") {
				t.Fatalf("migrate result %+v, want running on %v", res, want)
			}
			if u0, u1, u2 := h.used(0), h.used(1), h.used(2); u0 != 700 || u1 != 0 || u2 != 700 {
				t.Fatalf("after migrate: GPUs used %d, %d, %d MiB; want 700, 0, 700", u0, u1, u2)
			}
			if states := h.cudaStates("a"); !allEqual(states, "running") {
				t.Fatalf("after migrate: driver states %v", states)
			}
		})
	}
}

// otherChip is the simulated backend with GPUs renamed by UUID, as NVML
// lists a machine with GPUs of two chip types. Only the daemon sees the
// names: its refusal comes before any driver call.
type otherChip struct {
	*gpu.Sim
	names map[string]string
}

func (o otherChip) Sample(ctx context.Context) (gpu.Sample, error) {
	s, err := o.Sim.Sample(ctx)
	for i, dv := range s.Devices {
		if n, ok := o.names[dv.UUID]; ok {
			s.Devices[i].Name = n
		}
	}
	return s, err
}

// TestOtherChipRefused refuses a migrate or fork onto a GPU of another chip
// type ("The GPU to restore onto needs to ... be of the same chip type as
// the old GPU", cuCheckpointProcessRestore) before touching the process.
func TestOtherChipRefused(t *testing.T) {
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.Sim = "3x4G" })
	h.opts = append(h.opts, func(d *Daemon) {
		b, err := gpu.NewSim(d.cfg.SimDir, gpu.SimSpec{Count: 3, SizeMiB: 4096})
		if err != nil {
			t.Fatal(err)
		}
		b.SetLockWait(d.cfg.LockTimeout)
		d.gpus, d.simDir = otherChip{b, map[string]string{simgpu.DeviceUUID(2): "NVIDIA A100-SXM4-40GB"}}, d.cfg.SimDir
	})
	h.begin()
	h.jobs("a", 0, 500)
	untouched := func(what string) {
		t.Helper()
		if p := h.proc("a"); p.State != api.StateRunning || h.used(0) != 500 || !allEqual(h.cudaStates("a"), "running") || h.stopped("a") {
			t.Fatalf("after the refused %s: %s, GPU 0 %d MiB, driver states %v", what, p.State, h.used(0), h.cudaStates("a"))
		}
	}
	_, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 2}})
	wantCode(t, err, api.CodeInvalidArgument)
	if !strings.Contains(err.Error(), "chip") {
		t.Errorf("refusal %q does not name the chip type", err)
	}
	untouched("migrate")
	_, err = h.client().Fork(ctxT(t), api.ForkParams{Name: "a", Copies: 1, GPUs: []api.GPURef{{Index: 2}}})
	wantCode(t, err, api.CodeInvalidArgument)
	untouched("fork")
	if _, err := h.client().Process(ctxT(t), "a-1"); err == nil {
		t.Fatal("the refused fork made a copy")
	}
	if _, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "a", GPU: &api.GPURef{Index: 1}}); err != nil {
		t.Fatalf("migrate onto the same chip: %v", err)
	}
}
