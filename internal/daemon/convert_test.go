package daemon

import (
	"testing"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestToAPICheckpointedMemory: a frozen process reports the GPU memory it
// parked in host RAM, a hibernated one what its snapshot holds: the
// memory each needs back on its GPUs, though it holds none there now.
func TestToAPICheckpointedMemory(t *testing.T) {
	ckpt := &proctable.Checkpoint{Procs: []proctable.CheckpointProc{
		{PID: 7, VRAM: map[string]uint64{"GPU-a": 8000}},
		{PID: 8, VRAM: map[string]uint64{"GPU-a": 3000, "GPU-b": 1000}},
	}}
	gv := &gpuView{index: map[string]int{"GPU-a": 0, "GPU-b": 1}}
	for _, tt := range []struct {
		state            api.State
		tier             api.Tier
		hostMiB, diskMiB uint64
	}{
		{api.StateFrozen, api.TierHost, 12000, 0},
		{api.StateHibernated, api.TierDisk, 0, 12000},
		{api.StateRestoring, api.TierDisk, 0, 12000},
	} {
		r := proctable.Record{Name: "m", ID: "id-m", State: tt.state, GPUs: []string{"GPU-a", "GPU-b"}, Checkpoint: ckpt}
		p := toAPI(r, gv)
		if p.Tier != tt.tier || p.HostMiB != tt.hostMiB || p.DiskMiB != tt.diskMiB || p.VRAMMiB != 0 {
			t.Errorf("%s: tier %s, host %d, disk %d, vram %d; want %s, %d, %d, 0", tt.state, p.Tier, p.HostMiB, p.DiskMiB, p.VRAMMiB, tt.tier, tt.hostMiB, tt.diskMiB)
		}
	}
}
