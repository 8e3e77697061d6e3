package daemon

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

func ptrTo[T any](v T) *T { return &v }

// TestGPUHealth: every threshold names the GPU, the value and the flag;
// unknown metrics and thresholds left off pass.
func TestGPUHealth(t *testing.T) {
	hot := gpu.Device{Index: 1, UUID: "GPU-b", TotalMiB: 8192, UsedMiB: 7680,
		UtilPercent: ptrTo(97), PowerWatts: ptrTo(312.5), PowerLimitWatts: ptrTo(350.0), TempC: ptrTo(91)}
	unknown := gpu.Device{Index: 0, UUID: "GPU-a", TotalMiB: 8192}
	strict := func(c *config.Config) {
		c.MinFreeMiB, c.MaxUtilPercent, c.MaxPowerWatts, c.MaxTempC = 1024, 90, 300, 85
	}
	tests := []struct {
		name string
		cfg  func(*config.Config)
		dev  gpu.Device
		want []string
	}{
		{"no thresholds", func(*config.Config) {}, hot, nil},
		{"every threshold broken", strict, hot, []string{
			"GPU 1: free memory 512 MiB is below --min-free 1024 MiB",
			"GPU 1: utilization 97% is above --max-util 90",
			"GPU 1: power draw 312.5 W is above --max-power 300",
			"GPU 1: temperature 91 C is above --max-temp 85",
		}},
		{"at the thresholds", func(c *config.Config) {
			c.MinFreeMiB, c.MaxUtilPercent, c.MaxPowerWatts, c.MaxTempC = 512, 97, 312.5, 91
		}, hot, nil},
		{"unknown metrics pass", strict, unknown, nil},
		{"banned by index", func(c *config.Config) { c.BannedGPUs = []string{"1"} }, hot, []string{"GPU 1: banned by --ban-gpu"}},
		{"banned by uuid", func(c *config.Config) { c.BannedGPUs = []string{"GPU-a"} }, unknown, []string{"GPU 0: banned by --ban-gpu"}},
		{"another GPU banned", func(c *config.Config) { c.BannedGPUs = []string{"0", "GPU-c"} }, hot, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			tt.cfg(&cfg)
			if got := gpuHealth(&cfg, tt.dev); !slices.Equal(got, tt.want) {
				t.Errorf("gpuHealth = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestGPUsHealthLeasesFrozen runs on two simulated GPUs with --max-temp
// 85: GPU 0 made hot through the sim registry shows unhealthy with the
// reason, and placement keeps a queued job and a lease off it; a lease's
// own max_temp is honoured; the leases and the memory frozen off a GPU
// show in `gpus`.
func TestGPUsHealthLeasesFrozen(t *testing.T) {
	h := newQueueHarness(t, "2x8G", func(c *config.Config) { c.MaxTempC = 85 })
	c := h.client()
	gpus := func() []api.GPU {
		t.Helper()
		gs, err := c.GPUs(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) != 2 || gs[0].Index != 0 || gs[1].Index != 1 {
			t.Fatalf("gpus: %+v", gs)
		}
		return gs
	}
	setMetrics := func(i int, m simgpu.Metrics) {
		t.Helper()
		if err := h.reg.SetMetrics(simgpu.DeviceUUID(i), m); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range gpus() {
		if !g.Healthy || g.Unhealthy == nil || len(g.Unhealthy) != 0 || g.Leases == nil || len(g.Leases) != 0 ||
			g.FrozenMiB != 0 || g.TempC != nil || g.Driver != "sim" || g.Checkpoint != config.DriverSim {
			t.Fatalf("GPU %d before any metric: %+v", g.Index, g)
		}
	}

	setMetrics(0, simgpu.Metrics{TempC: ptrTo(95), UtilPercent: ptrTo(30), PowerWatts: ptrTo(250.5), PowerLimitWatts: ptrTo(300.0)})
	setMetrics(1, simgpu.Metrics{TempC: ptrTo(70)})
	h.refresh() // the next sample, now rather than at the next --gpu-poll
	gs := gpus()
	g0, g1 := gs[0], gs[1]
	if g0.Healthy || !slices.Equal(g0.Unhealthy, []string{"GPU 0: temperature 95 C is above --max-temp 85"}) {
		t.Errorf("GPU 0: healthy %v, unhealthy %q; want the temperature reason", g0.Healthy, g0.Unhealthy)
	}
	if g0.TempC == nil || *g0.TempC != 95 || g0.UtilPercent == nil || *g0.UtilPercent != 30 ||
		g0.PowerWatts == nil || *g0.PowerWatts != 250.5 || g0.PowerLimitWatts == nil || *g0.PowerLimitWatts != 300 {
		t.Errorf("GPU 0 metrics: %+v", g0)
	}
	if !g1.Healthy || g1.Unhealthy == nil || len(g1.Unhealthy) != 0 || g1.TempC == nil || *g1.TempC != 70 {
		t.Errorf("GPU 1: %+v; want healthy at 70 C", g1)
	}

	// A queued job, which would fit on either GPU, lands on the cool one.
	h.submit(api.JobSpec{Name: "small", Cmd: h.simjob("--vram", "512"), VRAM: api.VRAM{MiB: 512}})
	h.waitRunning("small")
	if j := h.job("small"); len(j.Attempts) != 1 || !slices.Equal(j.Attempts[0].GPUs, []string{simgpu.DeviceUUID(1)}) {
		t.Fatalf("job small ran on %+v; want GPU 1 only", j.Attempts)
	}

	// A lease's own max_temp, stricter than --max-temp, skips GPU 1 too.
	_, err := h.client().Acquire(ctxT(t), api.AcquireParams{MinFree: api.VRAM{MiB: 1024}, MaxTemp: 65})
	wantCode(t, err, api.CodeResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), "GPU 1 temperature 70 C > 65 C") {
		t.Errorf("lease with max_temp 65: %v; want it to name GPU 1's temperature", err)
	}
	_, err = h.client().Acquire(ctxT(t), api.AcquireParams{MaxTemp: -1})
	wantCode(t, err, api.CodeInvalidArgument)
	// A looser one is granted, on GPU 1: --max-temp still rules out GPU 0.
	holder := h.client()
	l, err := holder.Acquire(ctxT(t), api.AcquireParams{MinFree: api.VRAM{MiB: 1024}, MaxTemp: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.GPUs) != 1 || l.GPUs[0].Index != 1 {
		t.Fatalf("lease with max_temp 100: %+v; want GPU 1", l)
	}

	// Freeze a process holding 700 MiB on GPU 1: its memory shows as frozen
	// there, and the lease as holding it.
	h.jobs("parked", 1, 300, 400)
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "parked"}); err != nil {
		t.Fatal(err)
	}
	h.refresh()
	gs = gpus()
	if gs[1].FrozenMiB != 700 || gs[0].FrozenMiB != 0 {
		t.Errorf("frozen: GPU 0 %d MiB, GPU 1 %d MiB; want 0 and 700", gs[0].FrozenMiB, gs[1].FrozenMiB)
	}
	if !slices.Equal(gs[1].Leases, []string{l.ID}) || gs[0].Leases == nil || len(gs[0].Leases) != 0 {
		t.Errorf("leases: GPU 0 %q, GPU 1 %q; want only %s on GPU 1", gs[0].Leases, gs[1].Leases, l.ID)
	}
	if st, err := c.Status(ctxT(t)); err != nil || st.HostMiB != gs[1].FrozenMiB {
		t.Errorf("status host_mib %v (%v); want the frozen memory, %d MiB", st, err, gs[1].FrozenMiB)
	}

	// Thawed, released and cooled: nothing frozen, no lease, healthy.
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "parked"}); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Release(ctxT(t), l.ID); err != nil {
		t.Fatal(err)
	}
	setMetrics(0, simgpu.Metrics{})
	h.refresh()
	for _, g := range gpus() {
		if !g.Healthy || len(g.Unhealthy) != 0 || len(g.Leases) != 0 || g.FrozenMiB != 0 {
			t.Errorf("GPU %d after thaw, release and cooling: %s", g.Index, fmt.Sprintf("%+v", g))
		}
	}
}
