package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/gpu"
)

// TestBusyByOwnUtilizationWhereKnown: a process is busy on a GPU by its
// own utilization where every one of its processes there has a figure,
// and by the GPU's otherwise: a backend that cannot tell processes apart,
// or a GPU it holds nothing on.
func TestBusyByOwnUtilizationWhereKnown(t *testing.T) {
	pct := func(n int) *int { return &n }
	view := func(gpuUtil *int, procs ...gpu.ProcUsage) *gpuView {
		v := &gpuView{devices: []gpu.Device{{UUID: "GPU-0", UtilPercent: gpuUtil}}, procs: procs,
			usage: map[string]map[string]uint64{}, util: map[string]map[string]int{}, owner: map[int]string{}}
		for _, p := range procs {
			v.attribute(map[int]string{10: "a", 11: "a", 20: "b"}[p.PID], p)
		}
		return v
	}
	for _, tc := range []struct {
		what string
		v    *gpuView
		want bool
	}{
		{"own figure idle, the GPU busy with another's", view(pct(80),
			gpu.ProcUsage{PID: 10, UUID: "GPU-0", UtilPercent: pct(0)}, gpu.ProcUsage{PID: 20, UUID: "GPU-0", UtilPercent: pct(80)}), false},
		{"one of its processes busy", view(pct(30),
			gpu.ProcUsage{PID: 10, UUID: "GPU-0", UtilPercent: pct(0)}, gpu.ProcUsage{PID: 11, UUID: "GPU-0", UtilPercent: pct(30)}), true},
		{"one of its processes unknown: the GPU's", view(pct(5),
			gpu.ProcUsage{PID: 10, UUID: "GPU-0", UtilPercent: pct(0)}, gpu.ProcUsage{PID: 11, UUID: "GPU-0"}), true},
		{"no per-process figures, the GPU idle", view(pct(0), gpu.ProcUsage{PID: 10, UUID: "GPU-0"}), false},
		{"nothing of its own there: the GPU's", view(pct(50), gpu.ProcUsage{PID: 20, UUID: "GPU-0", UtilPercent: pct(50)}), true},
		{"the GPU's unknown too", view(nil, gpu.ProcUsage{PID: 10, UUID: "GPU-0"}), false},
	} {
		if got := tc.v.busy("a", "GPU-0"); got != tc.want {
			t.Errorf("%s: busy %v, want %v", tc.what, got, tc.want)
		}
	}
}
