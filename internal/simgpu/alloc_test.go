package simgpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
	"golang.org/x/sys/unix"
)

// newTestRegistry creates a registry with count devices of size MiB each.
func newTestRegistry(t *testing.T, count int, size uint64) *Registry {
	t.Helper()
	reg, err := Create(t.TempDir(), Devices(count, size))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// self returns the test process's pid and start time.
func self(t *testing.T) (int, uint64) {
	t.Helper()
	pid := os.Getpid()
	st, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid, st
}

func allocUntilOOM(reg *Registry, pid int, st uint64, uuid string) (int, error) {
	for n := 0; ; n++ {
		err := reg.Allocate(pid, st, uuid, 1)
		if errors.Is(err, ErrOutOfMemory) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func snapshot(t *testing.T, reg *Registry) Snapshot {
	t.Helper()
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func usedOn(snap Snapshot, uuid string) uint64 {
	for _, d := range snap.Devices {
		if d.UUID == uuid {
			return d.UsedMiB
		}
	}
	return 0
}

func recordExists(t *testing.T, reg *Registry, pid int) bool {
	t.Helper()
	_, err := os.Stat(reg.recordPath(uint32(os.Geteuid()), pid))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

func TestAllocateUpToLimitThenOOM(t *testing.T) {
	reg := newTestRegistry(t, 2, 4096)
	pid, st := self(t)
	gpu0, gpu1 := DeviceUUID(0), DeviceUUID(1)
	for i := 0; i < 3; i++ {
		if err := reg.Allocate(pid, st, gpu0, 1024); err != nil {
			t.Fatal(err)
		}
	}
	err := reg.Allocate(pid, st, gpu0, 2048)
	var oom *OutOfMemoryError
	if !errors.Is(err, ErrOutOfMemory) || !errors.As(err, &oom) {
		t.Fatalf("Allocate beyond the limit: %v, want out of memory", err)
	}
	want := "simulated GPU 0 (" + gpu0 + "): out of memory: tried to allocate 2048 MiB, 1024 MiB free of 4096 MiB"
	if err.Error() != want {
		t.Errorf("error = %q\nwant    %q", err, want)
	}
	if oom.FreeMiB != 1024 || oom.RequestedMiB != 2048 || oom.Device.Index != 0 {
		t.Errorf("OutOfMemoryError = %+v", oom)
	}
	if err := reg.Allocate(pid, st, gpu0, 1024); err != nil {
		t.Fatalf("Allocate of the last MiB: %v", err)
	}
	if err := reg.Allocate(pid, st, gpu1, 4096); err != nil {
		t.Fatalf("other device is independent: %v", err)
	}

	snap := snapshot(t, reg)
	if usedOn(snap, gpu0) != 4096 || usedOn(snap, gpu1) != 4096 {
		t.Errorf("used = %+v", snap.Devices)
	}
	want2 := []ProcUsage{{PID: pid, UUID: gpu0, UsedMiB: 4096}, {PID: pid, UUID: gpu1, UsedMiB: 4096}}
	if fmt.Sprint(snap.Procs) != fmt.Sprint(want2) {
		t.Errorf("procs = %v, want %v", snap.Procs, want2)
	}

	if err := reg.Free(pid, st, gpu0, 5000); err == nil {
		t.Error("Free of more than allocated succeeded")
	}
	if err := reg.Free(pid, st, gpu0, 1000); err != nil {
		t.Fatal(err)
	}
	if got := usedOn(snapshot(t, reg), gpu0); got != 3096 {
		t.Errorf("used after Free = %d, want 3096", got)
	}
	if err := reg.Release(pid); err != nil {
		t.Fatal(err)
	}
	if snap := snapshot(t, reg); len(snap.Procs) != 0 || usedOn(snap, gpu0) != 0 {
		t.Errorf("after Release: %+v", snap)
	}
	if err := reg.Release(pid); err != nil {
		t.Errorf("second Release: %v", err)
	}
}

func TestAllocateErrors(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, "GPU-nope", 1); !errors.Is(err, ErrNoSuchDevice) {
		t.Errorf("unknown device: %v", err)
	}
	if err := reg.Allocate(pid, st+100, DeviceUUID(0), 1); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("wrong start time: %v", err)
	}
	if err := reg.Free(pid, st, DeviceUUID(0), 1); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("Free without a record: %v", err)
	}
}

func TestConcurrentAllocationsNeverOversubscribe(t *testing.T) {
	const total, procs, goroutines = 300, 4, 8
	reg := newTestRegistry(t, 1, total)
	uuid := DeviceUUID(0)

	helpers := make([]*helperProc, procs)
	for i := range helpers {
		helpers[i] = startHelper(t, "alloc", helperDir+"="+reg.Dir(), helperUUID+"="+uuid)
		if got := helpers[i].line(t); got != "ready" {
			t.Fatalf("helper said %q, want ready", got)
		}
	}

	pid, st := self(t)
	start := make(chan struct{})
	counts := make([]int, goroutines)
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for i := range goroutines {
		wg.Go(func() {
			<-start
			counts[i], errs[i] = allocUntilOOM(reg, pid, st, uuid)
		})
	}
	for _, h := range helpers {
		if _, err := fmt.Fprintln(h.stdin, "go"); err != nil {
			t.Fatal(err)
		}
	}
	close(start)
	wg.Wait()

	perPID := map[int]uint64{}
	sum := 0
	for i, n := range counts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		sum += n
		perPID[pid] += uint64(n)
	}
	for _, h := range helpers {
		var n int
		if _, err := fmt.Sscanf(h.line(t), "count %d", &n); err != nil {
			t.Fatal(err)
		}
		sum += n
		perPID[h.cmd.Process.Pid] += uint64(n)
	}
	if sum != total {
		t.Errorf("allocations that succeeded = %d, want exactly %d", sum, total)
	}
	snap := snapshot(t, reg)
	if got := usedOn(snap, uuid); got != total {
		t.Errorf("used = %d, want %d", got, total)
	}
	for _, p := range snap.Procs {
		if p.UsedMiB != perPID[p.PID] {
			t.Errorf("pid %d: registry has %d MiB, it allocated %d", p.PID, p.UsedMiB, perPID[p.PID])
		}
	}
}

func TestDeadProcessPruned(t *testing.T) {
	for _, reap := range []bool{true, false} {
		t.Run("reaped="+strconv.FormatBool(reap), func(t *testing.T) {
			reg := newTestRegistry(t, 1, 1024)
			uuid := DeviceUUID(0)
			h := startHelper(t, "wait")
			pid := h.cmd.Process.Pid
			st, err := procfs.StartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			if err := reg.Allocate(pid, st, uuid, 1000); err != nil {
				t.Fatal(err)
			}
			if got := usedOn(snapshot(t, reg), uuid); got != 1000 {
				t.Fatalf("used while alive = %d, want 1000", got)
			}
			if err := h.stdin.Close(); err != nil {
				t.Fatal(err)
			}
			if reap {
				if err := h.cmd.Wait(); err != nil {
					t.Fatal(err)
				}
			} else {
				// Wait for the exit but leave a zombie: it holds no memory.
				var info unix.Siginfo
				if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
					t.Fatal(err)
				}
			}
			snap := snapshot(t, reg)
			if len(snap.Procs) != 0 || usedOn(snap, uuid) != 0 {
				t.Errorf("dead process still counted: %+v", snap)
			}
			if recordExists(t, reg, pid) {
				t.Error("record of the dead process was not removed")
			}
			spid, sst := self(t)
			if err := reg.Allocate(spid, sst, uuid, 1024); err != nil {
				t.Errorf("memory of the dead process not available: %v", err)
			}
		})
	}
}

func TestStartTimeMismatchPruned(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	rec := newRecord(pid, st+100) // as if pid had been reused
	rec.Usage[DeviceUUID(0)] = 512
	if err := reg.ensureUser(0); err != nil {
		t.Fatal(err)
	}
	if err := reg.writeRecord(0, rec); err != nil {
		t.Fatal(err)
	}
	if snap := snapshot(t, reg); len(snap.Procs) != 0 || snap.Devices[0].UsedMiB != 0 {
		t.Errorf("record with another start time counted: %+v", snap)
	}
	if recordExists(t, reg, pid) {
		t.Error("stale record not removed")
	}
}

func TestParkedMemoryDoesNotCount(t *testing.T) {
	reg := newTestRegistry(t, 1, 2048)
	pid, st := self(t)
	uuid := DeviceUUID(0)
	if err := reg.Allocate(pid, st, uuid, 1000); err != nil {
		t.Fatal(err)
	}
	if err := reg.Park(pid, st); err != nil {
		t.Fatal(err)
	}
	if snap := snapshot(t, reg); snap.Devices[0].UsedMiB != 0 || len(snap.Procs) != 0 {
		t.Errorf("parked memory counted: %+v", snap)
	}
	if err := reg.Allocate(pid, st, uuid, 2048); err != nil {
		t.Fatalf("whole device not free while parked: %v", err)
	}
	if err := reg.Unpark(pid, st); !errors.Is(err, ErrOutOfMemory) {
		t.Fatalf("Unpark onto a full device: %v, want out of memory", err)
	}
	if err := reg.Free(pid, st, uuid, 1048); err != nil {
		t.Fatal(err)
	}
	if err := reg.Unpark(pid, st); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, reg).Devices[0].UsedMiB; got != 2000 {
		t.Errorf("used after Unpark = %d, want 2000", got)
	}
}
