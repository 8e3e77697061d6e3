package simgpu

import (
	"errors"
	"strings"
	"testing"
)

// TestSetLimitCapsAllocate: a process's own limit on a device refuses what
// the device could still give, with an out-of-memory error that says so;
// other devices and other processes are not capped by it.
func TestSetLimitCapsAllocate(t *testing.T) {
	reg := newTestRegistry(t, 2, 16384)
	pid, st := self(t)
	gpu0, gpu1 := DeviceUUID(0), DeviceUUID(1)
	if err := reg.SetLimit(pid, st, gpu0, 4096); err != nil {
		t.Fatal(err)
	}
	if !recordExists(t, reg, pid) {
		t.Fatal("a limit alone must keep the record")
	}
	if got, err := reg.Limits(pid); err != nil || len(got) != 1 || got[gpu0] != 4096 {
		t.Fatalf("Limits = %v, %v", got, err)
	}
	err := reg.Allocate(pid, st, gpu0, 6144)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("6 GiB under a 4 GiB limit: %v, want out of memory", err)
	}
	if oom.LimitMiB != 4096 || oom.FreeMiB != 4096 || oom.RequestedMiB != 6144 {
		t.Errorf("OutOfMemoryError = %+v", oom)
	}
	want := "simulated GPU 0 (" + gpu0 + "): out of memory: tried to allocate 6144 MiB, 4096 MiB free under the process's MPS memory limit of 4096 MiB"
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if err := reg.Allocate(pid, st, gpu0, 3072); err != nil {
		t.Fatalf("3 GiB under a 4 GiB limit: %v", err)
	}
	if err := reg.Allocate(pid, st, gpu0, 1025); !errors.As(err, &oom) || oom.FreeMiB != 1024 {
		t.Fatalf("past the limit by 1 MiB: %v", err)
	}
	if err := reg.Allocate(pid, st, gpu0, 1024); err != nil {
		t.Fatalf("up to the limit exactly: %v", err)
	}
	if err := reg.Allocate(pid, st, gpu1, 8192); err != nil {
		t.Fatalf("the other device is not capped: %v", err)
	}
	// Freeing everything keeps the limit.
	if err := reg.Free(pid, st, gpu0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(pid, st, gpu0, 4097); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("limit after freeing: %v", err)
	}
	// A limit of 0 removes the cap.
	if err := reg.SetLimit(pid, st, gpu0, 0); err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(pid, st, gpu0, 6144); err != nil {
		t.Fatalf("after removing the limit: %v", err)
	}
	if err := reg.Release(pid); err != nil {
		t.Fatal(err)
	}
	if got, err := reg.Limits(pid); err != nil || len(got) != 0 {
		t.Fatalf("Limits after Release = %v, %v", got, err)
	}
}

// TestSetLimitDeviceFullFirst: when the device has less free than the
// limit allows, the usual device message is given.
func TestSetLimitDeviceFullFirst(t *testing.T) {
	reg := newTestRegistry(t, 1, 2048)
	pid, st := self(t)
	if err := reg.SetLimit(pid, st, DeviceUUID(0), 4096); err != nil {
		t.Fatal(err)
	}
	err := reg.Allocate(pid, st, DeviceUUID(0), 3072)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.LimitMiB != 0 || !strings.Contains(err.Error(), "2048 MiB free of 2048 MiB") {
		t.Fatalf("device smaller than the limit: %v", err)
	}
}

func TestSetLimitErrors(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if err := reg.SetLimit(pid, st, "GPU-nope", 1); !errors.Is(err, ErrNoSuchDevice) {
		t.Errorf("unknown device: %v", err)
	}
	if err := reg.SetLimit(pid, st+100, DeviceUUID(0), 1); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("wrong start time: %v", err)
	}
}
