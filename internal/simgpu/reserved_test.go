package simgpu

import (
	"errors"
	"strings"
	"testing"
)

// TestDriverReserve: a device whose driver reserves memory reports it as
// NVML does (in total and used), and its processes can allocate only what
// is left, the total cuMemGetInfo reports.
func TestDriverReserve(t *testing.T) {
	devs := Devices(1, 4096)
	devs[0].ReservedMiB = 616
	reg, err := Create(t.TempDir(), devs)
	if err != nil {
		t.Fatal(err)
	}
	if got := devs[0].CUDATotalMiB(); got != 4096-616 {
		t.Fatalf("CUDATotalMiB = %d, want %d", got, 4096-616)
	}
	snap := snapshot(t, reg)
	if d := snap.Devices[0]; d.TotalMiB != 4096 || d.UsedMiB != 616 || len(snap.Procs) != 0 {
		t.Fatalf("idle device: %+v, procs %+v", d, snap.Procs)
	}
	pid, st := self(t)
	defer reg.Release(pid)
	n, err := allocUntilOOM(reg, pid, st, DeviceUUID(0))
	if err != nil || n != 4096-616 {
		t.Fatalf("allocated %d MiB before out of memory (%v), want %d", n, err, 4096-616)
	}
	var oom *OutOfMemoryError
	if err := reg.Allocate(pid, st, DeviceUUID(0), 1); !errors.As(err, &oom) || oom.FreeMiB != 0 {
		t.Fatalf("allocate on the full device: %v", err)
	}
	if snap := snapshot(t, reg); usedOn(snap, DeviceUUID(0)) != 4096 || snap.Procs[0].UsedMiB != 4096-616 {
		t.Fatalf("full device: %+v", snap)
	}

	devs[0].ReservedMiB = 4096
	if _, err := Create(t.TempDir(), devs); err == nil || !strings.Contains(err.Error(), "leaves nothing") {
		t.Fatalf("Create with all memory reserved: %v", err)
	}
	devs[0].ReservedMiB, devs[0].ContextMiB = 616, 4096-616
	if _, err := Create(t.TempDir(), devs); err == nil || !strings.Contains(err.Error(), "leaves nothing") {
		t.Fatalf("Create with a context as large as the device: %v", err)
	}
}
