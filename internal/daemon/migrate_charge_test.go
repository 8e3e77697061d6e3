package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestMigratedProcessFreesItsOldGPU: once a process has moved to another
// GPU, placement no longer charges its peak to the GPU it left, so a job
// that fits only there starts at once.
func TestMigratedProcessFreesItsOldGPU(t *testing.T) {
	h := newQueueHarness(t, "2x24G")
	h.jobs("m", 0, 12000)
	if _, err := h.client().Migrate(ctxT(t), api.MigrateParams{Name: "m", GPU: &api.GPURef{Index: 1}}); err != nil {
		t.Fatal(err)
	}
	// 14 GiB does not fit beside m's 12000 MiB on GPU 1: only GPU 0, empty now.
	h.submit(api.JobSpec{Name: "big", Cmd: h.simjob("--vram", "14000"), VRAM: gib(14)})
	h.waitRunning("big")
	if a := h.job("big").Attempts; len(a) != 1 || len(a[0].GPUs) != 1 || a[0].GPUs[0] != simgpu.DeviceUUID(0) {
		t.Fatalf("big's attempts %+v, want one on GPU 0", a)
	}
}
