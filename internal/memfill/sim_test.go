package memfill

import (
	"os"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// TestSimBackendLeavesOutReserve: on a simulated GPU whose driver reserves
// memory, the sim backend reports what cuMemGetInfo does on a real one:
// NVML's free memory, of a total without the reserve (on an H200, driver
// 580.159.04: 143155 of NVML's 143771 MiB).
func TestSimBackendLeavesOutReserve(t *testing.T) {
	devs := simgpu.Devices(1, 4096)
	devs[0].ReservedMiB = 616
	reg, err := simgpu.Create(t.TempDir(), devs)
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	start, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openSim(reg.Dir(), devs[0].UUID, 256, pid, start)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if free, total, err := b.Free(); err != nil || free != 4096-616 || total != 4096-616 {
		t.Fatalf("Free on the idle device: %d of %d, %v; want %d of %d", free, total, err, 4096-616, 4096-616)
	}
	if _, err := b.Alloc(); err != nil {
		t.Fatal(err)
	}
	if free, total, err := b.Free(); err != nil || free != 4096-616-256 || total != 4096-616 {
		t.Fatalf("Free with a chunk held: %d of %d, %v", free, total, err)
	}
}
