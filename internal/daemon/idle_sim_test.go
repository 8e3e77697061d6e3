package daemon

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestIdlePolicyUnderSim: on simulated GPUs, an idle policy freezes a
// simulated job that only holds its memory, and not one that keeps its GPU
// busy (gpusched-simjob --util), which the GPU's utilization shows.
func TestIdlePolicyUnderSim(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	c := h.client()
	run := func(name string, gpu int, idle time.Duration, args ...string) {
		t.Helper()
		_, err := c.Run(ctxT(t), api.RunParams{Name: name, Dir: "/", GPU: &api.GPURef{Index: gpu}, Idle: api.Duration(idle),
			Cmd: append([]string{h.bins.SimJob, "--vram", "256"}, args...)})
		if err != nil {
			t.Fatal(err)
		}
		h.followCount(name, "simjob: allocated", 1)
	}
	run("a-busy", 0, 0, "--util", "60")
	h.refresh()
	if dv := h.d.gpuView().devices; dv[0].UtilPercent == nil || *dv[0].UtilPercent != 60 || dv[1].UtilPercent != nil {
		t.Fatalf("utilization: GPU 0 %v, GPU 1 %v; want 60%% and unknown", dv[0].UtilPercent, dv[1].UtilPercent)
	}
	// a-busy gets its idle policy first, and the shorter one, and the
	// policy looks at processes by name, one after the other: were it taken
	// for idle, it would be frozen no later than b-idle.
	idle := api.Duration(250 * time.Millisecond)
	if _, err := c.Set(ctxT(t), api.SetParams{Name: "a-busy", Idle: &idle}); err != nil {
		t.Fatal(err)
	}
	run("b-idle", 1, 400*time.Millisecond)
	h.waitState("b-idle", api.StateFrozen)
	if p := h.proc("a-busy"); p.State != api.StateRunning {
		t.Fatalf("the busy job is %s (%s)", p.State, p.Note)
	}
}

// TestIdlePolicyFreezesTheIdleOneOfAGPU: where the GPU tells each
// process's utilization apart (NVML's per-process samples; the simulated
// GPU's per-process figures), an idle job is frozen beside a busy one on
// the same GPU, which the GPU's own utilization would have kept running
// for good; the busy one stays. The GPU listing and status show each
// one's figure.
func TestIdlePolicyFreezesTheIdleOneOfAGPU(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim)
	c := h.client()
	for _, name := range []string{"busy", "idle"} {
		args := []string{h.bins.SimJob, "--vram", "256"}
		if name == "busy" {
			args = append(args, "--util", "60")
		}
		if _, err := c.Run(ctxT(t), api.RunParams{Name: name, Dir: "/", GPU: &api.GPURef{Index: 0}, Cmd: args}); err != nil {
			t.Fatal(err)
		}
		h.followCount(name, "simjob: allocated", 1)
	}
	h.refresh()
	gpus, err := c.GPUs(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	utils := map[string]string{}
	for _, gp := range gpus[0].Processes {
		if gp.UtilPercent != nil {
			utils[gp.Managed] = fmt.Sprint(*gp.UtilPercent)
		}
	}
	if fmt.Sprint(utils) != "map[busy:60 idle:0]" || gpus[0].UtilPercent == nil || *gpus[0].UtilPercent != 60 {
		t.Fatalf("GPU 0 at %v, its processes %v; want 60%%, busy 60%% and idle 0%%", gpus[0].UtilPercent, utils)
	}
	if g := h.proc("busy").GPUs; len(g) != 1 || g[0].UtilPercent == nil || *g[0].UtilPercent != 60 {
		t.Fatalf("status busy: GPUs %+v, want GPU 0 at 60%%", g)
	}
	// busy gets its idle policy first, and the shorter one, and the policy
	// looks at processes by name, one after the other: were it taken for
	// idle, it would be frozen no later than the idle one.
	for _, set := range []struct {
		name string
		idle time.Duration
	}{{"busy", 250 * time.Millisecond}, {"idle", 400 * time.Millisecond}} {
		idle := api.Duration(set.idle)
		if _, err := c.Set(ctxT(t), api.SetParams{Name: set.name, Idle: &idle}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitState("idle", api.StateFrozen)
	if p := h.proc("busy"); p.State != api.StateRunning {
		t.Fatalf("the busy job is %s (%s)", p.State, p.Note)
	}
}
