package daemon

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDiskTierWithCUDAPlugin thaws a hibernated process from disk onto its
// GPU and onto the other one, and forks a process onto the other GPU, with
// CRIU's CUDA plugin installed where CRIU loads plugins from
// ($CRIU_LIBS_DIR; the stand-in of checkpointtest/criuplugin) and without
// it. The plugin, if CRIU loaded it, would restore and unlock every CUDA
// process during the CRIU restore, on the GPU it was dumped on: the
// daemon's own restore would then meet a running process, and a thaw or a
// fork onto another GPU would leave it where it was.
func TestDiskTierWithCUDAPlugin(t *testing.T) {
	cases := []struct {
		name string
		run  func(h *ckptHarness)
	}{
		{"thaw", func(h *ckptHarness) {
			ticks := h.hibernateJob()
			if _, err := h.client().Thaw(ctxT(h.t), api.ThawParams{Name: "job"}); err != nil {
				h.t.Fatal(err)
			}
			h.wantUse("thaw from disk", 512, 0)
			h.verifyContinued("job", ticks)
		}},
		{"thaw onto GPU 1", func(h *ckptHarness) {
			ticks := h.hibernateJob()
			res, err := h.client().Migrate(ctxT(h.t), api.MigrateParams{Name: "job", GPU: &api.GPURef{Index: 1}})
			if err != nil {
				h.t.Fatal(err)
			}
			if res.State != api.StateRunning || len(res.GPUs) != 1 || res.GPUs[0] != simgpu.DeviceUUID(1) {
				h.t.Fatalf("migrate from disk: %+v", res)
			}
			h.wantUse("thaw from disk onto GPU 1", 0, 512)
			h.verifyContinued("job", ticks)
		}},
		{"fork onto GPU 1", func(h *ckptHarness) {
			c := h.client()
			res, err := c.Fork(ctxT(h.t), api.ForkParams{Name: "job", Copies: 1, GPUs: []api.GPURef{{Index: 1}}})
			if err != nil {
				h.t.Fatal(err)
			}
			if len(res.Copies) != 1 || res.Copies[0].State != api.StateRunning {
				h.t.Fatalf("fork onto GPU 1: %+v", res)
			}
			h.wantUse("fork onto GPU 1", 512, 512)
			if got := h.cudaStates("job-1"); len(got) != 1 || !allEqual(got, "running") {
				h.t.Fatalf("CUDA states of the copy %v", got)
			}
			h.followCount("job-1", "tick ", 2) // in its own log, from the source's count on
			if _, err := c.Kill(ctxT(h.t), api.KillParams{Name: "job-1", Signal: "SIGUSR1"}); err != nil {
				h.t.Fatal(err)
			}
			h.followCount("job-1", "simjob: host memory verified", 1)
		}},
	}
	for _, plugin := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%s/plugin=%v", tc.name, plugin), func(t *testing.T) {
				h := prepareCkpt(t, config.DriverCLI, func(c *config.Config) { c.CRIU = testutil.CRIU(t) })
				if plugin {
					t.Setenv("CRIU_LIBS_DIR", testutil.CRIUCUDAPlugin(t, h.cfg.CudaCheckpoint))
				}
				h.begin()
				if hello, err := h.client().Hello(ctxT(t)); err != nil || slices.Contains(hello.Capabilities, api.CapCUDAPlugin) != plugin {
					t.Fatalf("hello %+v, %v: want %s exactly when the plugin is installed", hello, err, api.CapCUDAPlugin)
				}
				h.memJob("job", 512, 32)
				tc.run(h)
			})
		}
	}
}

// hibernateJob hibernates "job" and returns its last tick.
func (h *ckptHarness) hibernateJob() int {
	h.t.Helper()
	if _, err := h.client().Hibernate(ctxT(h.t), api.HibernateParams{Name: "job"}); err != nil {
		h.t.Fatal(err)
	}
	return h.lastTick("job")
}

// wantUse checks the simulated GPUs' used memory.
func (h *ckptHarness) wantUse(what string, u0, u1 uint64) {
	h.t.Helper()
	if g0, g1 := h.used(0), h.used(1); g0 != u0 || g1 != u1 {
		h.t.Fatalf("%s: GPU use %d, %d MiB; want %d, %d", what, g0, g1, u0, u1)
	}
}
