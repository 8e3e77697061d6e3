package memfill

import (
	"os"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// TestSimBackendAsCUDA: on a simulated GPU whose driver reserves memory
// and where a CUDA context costs memory, the sim backend reports what
// cuMemGetInfo does on a real one (measured on an H200, driver 580.159.04):
// NVML's free memory, its own context counted as used, of a total without
// the reserve; and the registry, like NVML, counts the context as the
// helper's.
func TestSimBackendAsCUDA(t *testing.T) {
	const total, reserved, context = 4096, 616, 518
	devs := simgpu.Devices(1, total)
	devs[0].ReservedMiB, devs[0].ContextMiB = reserved, context
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
	if free, cudaTotal, err := b.Free(); err != nil || free != total-reserved-context || cudaTotal != total-reserved {
		t.Fatalf("Free with the context only: %d of %d, %v; want %d of %d", free, cudaTotal, err, total-reserved-context, total-reserved)
	}
	if _, err := b.Alloc(); err != nil {
		t.Fatal(err)
	}
	if free, _, err := b.Free(); err != nil || free != total-reserved-context-256 {
		t.Fatalf("Free with a chunk held: %d, %v", free, err)
	}
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if d, p := snap.Devices[0], snap.Procs; d.UsedMiB != reserved+context+256 || len(p) != 1 || p[0].UsedMiB != context+256 {
		t.Fatalf("NVML's view: device %+v, processes %+v", d, p)
	}
}
