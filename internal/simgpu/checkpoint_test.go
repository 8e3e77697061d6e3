package simgpu

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
)

func mustState(t *testing.T, reg *Registry, pid int, want string) {
	t.Helper()
	got, err := reg.CheckpointState(pid)
	if err != nil || got != want {
		t.Fatalf("CheckpointState(%d) = %q, %v; want %q", pid, got, err, want)
	}
}

func TestCheckpointCycle(t *testing.T) {
	reg := newTestRegistry(t, 2, 4096)
	pid, st := self(t)
	gpu0, gpu1 := DeviceUUID(0), DeviceUUID(1)
	if err := reg.Allocate(pid, st, gpu0, 1000); err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(pid, st, gpu1, 500); err != nil {
		t.Fatal(err)
	}
	mustState(t, reg, pid, StateRunning)

	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	mustState(t, reg, pid, StateLocked)
	if err := reg.Allocate(pid, st, gpu0, 1); !errors.Is(err, ErrLocked) {
		t.Errorf("Allocate while locked: %v, want ErrLocked", err)
	}
	if err := reg.Free(pid, st, gpu0, 1); !errors.Is(err, ErrLocked) {
		t.Errorf("Free while locked: %v, want ErrLocked", err)
	}

	moved, err := reg.CheckpointProcess(pid)
	if err != nil || moved != 1500 {
		t.Fatalf("CheckpointProcess = %d, %v; want 1500", moved, err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if snap := snapshot(t, reg); usedOn(snap, gpu0) != 0 || usedOn(snap, gpu1) != 0 {
		t.Errorf("device memory still used while checkpointed: %+v", snap.Devices)
	}
	if err := reg.Allocate(pid, st, gpu0, 1); !errors.Is(err, ErrLocked) {
		t.Errorf("Allocate while checkpointed: %v, want ErrLocked", err)
	}

	moved, err = reg.RestoreProcess(context.Background(), pid, nil)
	if err != nil || moved != 1500 {
		t.Fatalf("RestoreProcess = %d, %v; want 1500", moved, err)
	}
	mustState(t, reg, pid, StateLocked)
	if snap := snapshot(t, reg); usedOn(snap, gpu0) != 1000 || usedOn(snap, gpu1) != 500 {
		t.Errorf("used after restore: %+v", snap.Devices)
	}

	if err := reg.UnlockProcess(pid); err != nil {
		t.Fatal(err)
	}
	mustState(t, reg, pid, StateRunning)
	if err := reg.Allocate(pid, st, gpu0, 24); err != nil {
		t.Errorf("Allocate after unlock: %v", err)
	}
	if err := reg.Release(pid); err != nil {
		t.Fatal(err)
	}
}

func TestIllegalTransitions(t *testing.T) {
	reg := newTestRegistry(t, 1, 4096)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, DeviceUUID(0), 100); err != nil {
		t.Fatal(err)
	}
	actions := map[string]func() error{
		"lock":       func() error { return reg.LockProcess(pid) },
		"checkpoint": func() error { _, err := reg.CheckpointProcess(pid); return err },
		"restore":    func() error { _, err := reg.RestoreProcess(context.Background(), pid, nil); return err },
		"unlock":     func() error { return reg.UnlockProcess(pid) },
	}
	legal := map[string]string{
		StateRunning:      "lock",
		StateLocked:       "checkpoint unlock",
		StateCheckpointed: "restore",
		StateFailed:       "",
	}
	for from, ok := range legal {
		for name, act := range actions {
			if slices.Contains(strings.Fields(ok), name) {
				continue
			}
			t.Run(from+"/"+name, func(t *testing.T) {
				if err := reg.SetCheckpointState(pid, from); err != nil {
					t.Fatal(err)
				}
				if err := act(); !errors.Is(err, ErrIllegalState) {
					t.Errorf("%s from %s: %v, want ErrIllegalState", name, from, err)
				}
				mustState(t, reg, pid, from)
			})
		}
	}
	if err := reg.SetCheckpointState(pid, "frozen"); err == nil {
		t.Error("SetCheckpointState accepted an unknown state")
	}
}

func TestRestoreOutOfMemory(t *testing.T) {
	reg := newTestRegistry(t, 1, 2048)
	gpu0 := DeviceUUID(0)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, gpu0, 1000); err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	other := startHelper(t, "wait")
	opid := other.cmd.Process.Pid
	ost, err := procfs.StartTime(opid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(opid, ost, gpu0, 1500); err != nil {
		t.Fatal(err)
	}

	_, err = reg.RestoreProcess(context.Background(), pid, nil)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) || oom.RequestedMiB != 1000 || oom.FreeMiB != 548 {
		t.Fatalf("RestoreProcess onto a full GPU: %v, want OOM for 1000 MiB with 548 free", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if got := usedOn(snapshot(t, reg), gpu0); got != 1500 {
		t.Errorf("used after the failed restore = %d, want 1500", got)
	}

	// NVIDIA/cuda-checkpoint#44: once room is back, restore still fails
	// (304) and unlock is illegal (401); the process stays checkpointed.
	if err := reg.Release(opid); err != nil {
		t.Fatal(err)
	}
	if moved, err := reg.RestoreProcess(context.Background(), pid, nil); !errors.Is(err, ErrRestoreBroken) || moved != 0 {
		t.Fatalf("RestoreProcess once room = %d, %v; want ErrRestoreBroken", moved, err)
	}
	if err := reg.UnlockProcess(pid); !errors.Is(err, ErrIllegalState) {
		t.Errorf("unlock after the broken restore: %v, want ErrIllegalState", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if got := usedOn(snapshot(t, reg), gpu0); got != 0 {
		t.Errorf("used after the refused restore = %d, want 0", got)
	}
}

func TestBreakRestore(t *testing.T) {
	reg := newTestRegistry(t, 1, 2048)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, DeviceUUID(0), 100); err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	if err := reg.BreakRestore(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.RestoreProcess(context.Background(), pid, nil); !errors.Is(err, ErrRestoreBroken) {
		t.Fatalf("restore after BreakRestore: %v, want ErrRestoreBroken", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
}

func TestRestoreRemap(t *testing.T) {
	reg := newTestRegistry(t, 3, 2048)
	gpu0, gpu1, gpu2 := DeviceUUID(0), DeviceUUID(1), DeviceUUID(2)
	pid, st := self(t)
	for _, u := range []string{gpu0, gpu1} {
		if err := reg.Allocate(pid, st, u, 800); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	// Both onto one device: 1600 MiB fits in 2048 only as a whole.
	if _, err := reg.RestoreProcess(context.Background(), pid, map[string]string{gpu0: "GPU-nope", gpu1: gpu1}); !errors.Is(err, ErrNoSuchDevice) {
		t.Errorf("remap onto an unknown GPU: %v, want ErrNoSuchDevice", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	moved, err := reg.RestoreProcess(context.Background(), pid, map[string]string{gpu0: gpu2, gpu1: gpu2})
	if err != nil || moved != 1600 {
		t.Fatalf("RestoreProcess with remap = %d, %v", moved, err)
	}
	snap := snapshot(t, reg)
	if usedOn(snap, gpu0) != 0 || usedOn(snap, gpu1) != 0 || usedOn(snap, gpu2) != 1600 {
		t.Errorf("used after remap: %+v", snap.Devices)
	}
}

func TestNoCUDAContext(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if _, err := reg.CheckpointState(pid); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("no record: %v, want ErrNoCUDA", err)
	}
	rec := newRecord(pid, st+100) // a reused pid
	rec.Usage[DeviceUUID(0)] = 10
	if err := reg.ensureUser(0); err != nil {
		t.Fatal(err)
	}
	if err := reg.writeRecord(0, rec); err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(pid); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("start time mismatch: %v, want ErrNoCUDA", err)
	}

	h := startHelper(t, "wait")
	hpid := h.cmd.Process.Pid
	hst, err := procfs.StartTime(hpid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(hpid, hst, DeviceUUID(0), 10); err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(hpid); err != nil {
		t.Fatal(err)
	}
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointState(hpid); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("dead process: %v, want ErrNoCUDA", err)
	}
	if _, err := reg.CheckpointState(-1); !errors.Is(err, ErrNoCUDA) {
		t.Errorf("pid -1: %v, want ErrNoCUDA", err)
	}
}

func TestNotRunningRecordKept(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	rec := newRecord(pid, st)
	rec.CUDA = StateFailed
	if err := reg.ensureUser(0); err != nil {
		t.Fatal(err)
	}
	if err := reg.writeRecord(0, rec); err != nil {
		t.Fatal(err)
	}
	snapshot(t, reg) // prunes garbage
	if !recordExists(t, reg, pid) {
		t.Fatal("record of a failed process without memory was removed")
	}
	mustState(t, reg, pid, StateFailed)
	if err := reg.SetCheckpointState(pid, StateRunning); err != nil {
		t.Fatal(err)
	}
	if recordExists(t, reg, pid) {
		t.Error("empty record of a running process kept")
	}
}
