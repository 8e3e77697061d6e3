package simgpu

import (
	"context"
	"errors"
	"testing"
)

// checkpointedSelf registers the test process with mib MiB on each of
// uuids and checkpoints it.
func checkpointedSelf(t *testing.T, reg *Registry, mib uint64, uuids ...string) int {
	t.Helper()
	pid, st := self(t)
	for _, u := range uuids {
		if err := reg.Allocate(pid, st, u, mib); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = reg.Release(pid) })
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestRestoreMapMustListEveryGPU(t *testing.T) {
	reg := newTestRegistry(t, 3, 2048)
	gpu0, gpu1, gpu2 := DeviceUUID(0), DeviceUUID(1), DeviceUUID(2)
	pid := checkpointedSelf(t, reg, 800, gpu0, gpu1)
	ctx := context.Background()

	// Only the GPU that moves: refused, nothing moved (NVIDIA/cuda-checkpoint#35).
	if _, err := reg.RestoreProcess(ctx, pid, map[string]string{gpu1: gpu2}); !errors.Is(err, ErrBadDeviceMap) {
		t.Fatalf("restore with a partial map: %v, want ErrBadDeviceMap", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	snap := snapshot(t, reg)
	if usedOn(snap, gpu0)+usedOn(snap, gpu1)+usedOn(snap, gpu2) != 0 {
		t.Fatalf("memory moved by a refused restore: %+v", snap.Devices)
	}

	// Every checkpointed GPU, the one that stays as an identity pair.
	if _, err := reg.RestoreProcess(ctx, pid, map[string]string{gpu0: gpu0, gpu1: gpu2}); err != nil {
		t.Fatalf("restore with a complete map: %v", err)
	}
	snap = snapshot(t, reg)
	if usedOn(snap, gpu0) != 800 || usedOn(snap, gpu1) != 0 || usedOn(snap, gpu2) != 800 {
		t.Errorf("used after the restore: %+v", snap.Devices)
	}
}

func TestRestoreMapOfIdentitiesIsNoMap(t *testing.T) {
	reg := newTestRegistry(t, 2, 2048)
	gpu0, gpu1 := DeviceUUID(0), DeviceUUID(1)
	pid := checkpointedSelf(t, reg, 500, gpu0, gpu1)
	if _, err := reg.RestoreProcess(context.Background(), pid, map[string]string{gpu0: gpu0}); err != nil {
		t.Fatalf("restore with one identity pair: %v", err)
	}
	mustState(t, reg, pid, StateLocked)
}

func TestRestoreMapRefusesAnotherChip(t *testing.T) {
	devs := Devices(3, 2048)
	devs[0].Name, devs[1].Name, devs[2].Name = "NVIDIA L4", "NVIDIA L4", "NVIDIA A100-SXM4-40GB"
	reg, err := Create(t.TempDir(), devs)
	if err != nil {
		t.Fatal(err)
	}
	gpu0, gpu1, gpu2 := DeviceUUID(0), DeviceUUID(1), DeviceUUID(2)
	pid := checkpointedSelf(t, reg, 500, gpu0)
	ctx := context.Background()
	if _, err := reg.RestoreProcess(ctx, pid, map[string]string{gpu0: gpu2}); !errors.Is(err, ErrBadDeviceMap) {
		t.Fatalf("restore onto another chip: %v, want ErrBadDeviceMap", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if _, err := reg.RestoreProcess(ctx, pid, map[string]string{gpu0: gpu1}); err != nil {
		t.Fatalf("restore onto the same chip: %v", err)
	}
	if got := usedOn(snapshot(t, reg), gpu1); got != 500 {
		t.Errorf("%d MiB on GPU 1 after the restore, want 500", got)
	}
}
