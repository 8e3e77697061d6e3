package simgpu

import (
	"testing"
)

// utils is each device's utilization in a snapshot, -1 when unknown.
func utils(t *testing.T, reg *Registry) []int {
	t.Helper()
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int, len(snap.Devices))
	for i, d := range snap.Devices {
		out[i] = -1
		if d.Metrics.UtilPercent != nil {
			out[i] = *d.Metrics.UtilPercent
		}
	}
	return out
}

// TestSetUtilIsTheDevicesUtilization: a device is as busy as its running
// processes say they keep it, on the devices where they hold memory, and
// unknown where none said; SetMetrics overrides it, and a locked process
// does no work.
func TestSetUtilIsTheDevicesUtilization(t *testing.T) {
	reg := newTestRegistry(t, 2, 4096)
	pid, st := self(t)
	gpu0 := DeviceUUID(0)
	if got := utils(t, reg); got[0] != -1 || got[1] != -1 {
		t.Fatalf("devices nobody said anything of: %v", got)
	}
	if err := reg.SetUtil(pid, st, 60); err != nil {
		t.Fatal(err)
	}
	if !recordExists(t, reg, pid) {
		t.Fatal("a utilization alone must keep the record")
	}
	if got := utils(t, reg); got[0] != -1 || got[1] != -1 {
		t.Fatalf("busy without memory anywhere: %v", got)
	}
	if err := reg.Allocate(pid, st, gpu0, 1024); err != nil {
		t.Fatal(err)
	}
	if got := utils(t, reg); got[0] != 60 || got[1] != -1 {
		t.Fatalf("60%% on GPU 0: %v", got)
	}
	five := 5
	if err := reg.SetMetrics(gpu0, Metrics{UtilPercent: &five}); err != nil {
		t.Fatal(err)
	}
	if got := utils(t, reg); got[0] != 5 {
		t.Fatalf("metrics.json sets 5%%: %v", got)
	}
	if err := reg.SetMetrics(gpu0, Metrics{}); err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if got := utils(t, reg); got[0] != 0 {
		t.Fatalf("a locked process keeps GPU 0 busy: %v", got)
	}
	for _, bad := range []int{-1, 101} {
		if err := reg.SetUtil(pid, st, bad); err == nil {
			t.Errorf("SetUtil %d accepted", bad)
		}
	}
}

// TestSnapshotTellsEachProcessesUtilization: each process's usage carries
// its own utilization, 0 where it declared none or is locked, whatever
// the device's.
func TestSnapshotTellsEachProcessesUtilization(t *testing.T) {
	reg := newTestRegistry(t, 1, 4096)
	pid, st := self(t)
	gpu0 := DeviceUUID(0)
	procUtil := func() int {
		t.Helper()
		snap, err := reg.Snapshot()
		if err != nil || len(snap.Procs) != 1 {
			t.Fatalf("snapshot: %+v, %v; want one process", snap.Procs, err)
		}
		return snap.Procs[0].UtilPercent
	}
	if err := reg.Allocate(pid, st, gpu0, 1024); err != nil {
		t.Fatal(err)
	}
	if got := procUtil(); got != 0 {
		t.Fatalf("a process that declared nothing: %d%%", got)
	}
	if err := reg.SetUtil(pid, st, 60); err != nil {
		t.Fatal(err)
	}
	five := 5
	if err := reg.SetMetrics(gpu0, Metrics{UtilPercent: &five}); err != nil {
		t.Fatal(err)
	}
	if got := procUtil(); got != 60 {
		t.Fatalf("a process keeping its GPU 60%% busy, the device set to 5%%: %d%%", got)
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if got := procUtil(); got != 0 {
		t.Fatalf("a locked process: %d%%", got)
	}
}

// TestForgedUtilizationIsHeldToAPercent: a record written past SetUtil
// (a user's own file) counts as 0 to 100 for its process and its device
// (below 0: as if it declared none).
func TestForgedUtilizationIsHeldToAPercent(t *testing.T) {
	reg := newTestRegistry(t, 1, 4096)
	pid, st := self(t)
	if err := reg.ensureUser(0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ forged, want, device int }{{-50, 0, -1}, {1 << 40, 100, 100}} { // device -1: none declared
		rec := newRecord(pid, st)
		rec.Usage[DeviceUUID(0)], rec.Util = 1024, tc.forged
		if err := reg.writeRecord(0, rec); err != nil {
			t.Fatal(err)
		}
		snap := snapshot(t, reg)
		if len(snap.Procs) != 1 || snap.Procs[0].UtilPercent != tc.want {
			t.Errorf("util %d written: the process at %+v, want %d%%", tc.forged, snap.Procs, tc.want)
		}
		if got := utils(t, reg)[0]; got != tc.device {
			t.Errorf("util %d written: the device at %d%%, want %d (-1: unknown)", tc.forged, got, tc.device)
		}
	}
}
