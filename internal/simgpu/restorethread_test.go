package simgpu

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// checkpointedHelper starts a helper process holding 100 MiB on GPU 0 and
// checkpoints it; it returns the helper's pid and restore thread.
func checkpointedHelper(t *testing.T, reg *Registry) (pid, tid int) {
	t.Helper()
	h := startHelper(t, "hold", helperDir+"="+reg.Dir(), helperUUID+"="+DeviceUUID(0))
	if l := h.line(t); l != "ready" {
		t.Fatalf("helper: %q", l)
	}
	pid = h.cmd.Process.Pid
	tid, err := reg.RestoreThreadID(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	return pid, tid
}

// ptraceStop stops thread tid as CRIU seizes a task (PTRACE_SEIZE, then
// PTRACE_INTERRUPT) and returns once it is in its ptrace stop. The calling
// goroutine must keep its OS thread (the tracer) until it detaches, and
// detach (again) before it lets go of it.
func ptraceStop(t *testing.T, tid int) {
	t.Helper()
	if err := unix.PtraceSeize(tid); err != nil {
		t.Fatalf("seize %d: %v", tid, err)
	}
	if err := unix.PtraceInterrupt(tid); err != nil {
		t.Fatalf("interrupt %d: %v", tid, err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil || !ws.Stopped() {
		t.Fatalf("wait for %d to stop: %v, status %v", tid, err, ws)
	}
}

func TestRestoreThreadIsNotTheMainThread(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, tid := checkpointedHelper(t, reg)
	if tid == pid {
		t.Fatalf("restore thread %d is the process's main thread", tid)
	}
	if state, err := threadState(pid, tid); err != nil || stopped(state) {
		t.Fatalf("restore thread %d of %d: state %c, %v", tid, pid, state, err)
	}
}

func TestRestoreWaitsForItsThread(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, tid := checkpointedHelper(t, reg)
	runtime.LockOSThread() // the tracer
	defer runtime.UnlockOSThread()
	defer func() { _, _ = unix.PtraceDetach(pid), unix.PtraceDetach(tid) }() // should the test fail while they are stopped

	// Another thread stopped (CRIU seizes them all) does not matter.
	ptraceStop(t, pid)
	if _, err := reg.RestoreProcess(context.Background(), pid, nil); err != nil {
		t.Fatalf("restore with the main thread stopped: %v", err)
	}
	if err := unix.PtraceDetach(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}

	// The restore thread stopped: the restore does not proceed.
	ptraceStop(t, tid)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := reg.RestoreProcess(ctx, pid, nil)
	if !errors.Is(err, ErrRestoreThreadStopped) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("restore with its thread stopped: %v, want ErrRestoreThreadStopped at the deadline", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if got := usedOn(snapshot(t, reg), DeviceUUID(0)); got != 0 {
		t.Errorf("%d MiB used after the stalled restore, want 0", got)
	}

	// A restore in flight goes on once the thread runs again.
	done := make(chan error, 1)
	go func() {
		_, err := reg.RestoreProcess(context.Background(), pid, nil)
		done <- err
	}()
	if err := unix.PtraceDetach(tid); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("restore once the thread runs: %v", err)
	}
	mustState(t, reg, pid, StateLocked)
	if got := usedOn(snapshot(t, reg), DeviceUUID(0)); got != 100 {
		t.Errorf("%d MiB used after the restore, want 100", got)
	}
}

func TestRestoreWaitsWhileProcessStopped(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, _ := checkpointedHelper(t, reg)
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid, unix.SIGCONT) // should the test fail while it is stopped
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := reg.RestoreProcess(ctx, pid, nil); !errors.Is(err, ErrRestoreThreadStopped) {
		t.Fatalf("restore of a stopped process: %v, want ErrRestoreThreadStopped", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.RestoreProcess(context.Background(), pid, nil); err != nil {
		t.Fatalf("restore once continued: %v", err)
	}
	mustState(t, reg, pid, StateLocked)
}

// TestRestoreWaitsWhileCgroupFrozen: the same wait for a process whose
// cgroup is frozen (cgroup.freeze), whose restore thread does not run
// either (criu#2470).
func TestRestoreWaitsWhileCgroupFrozen(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, _ := checkpointedHelper(t, reg)
	thaw := freezeAlone(t, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := reg.RestoreProcess(ctx, pid, nil); !errors.Is(err, ErrRestoreThreadStopped) {
		t.Fatalf("restore of a process in a frozen cgroup: %v, want ErrRestoreThreadStopped", err)
	}
	mustState(t, reg, pid, StateCheckpointed)
	thaw()
	if _, err := reg.RestoreProcess(context.Background(), pid, nil); err != nil {
		t.Fatalf("restore once thawed: %v", err)
	}
	mustState(t, reg, pid, StateLocked)
}

func TestImportFindsRestoreThreadAgain(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, tid := checkpointedHelper(t, reg)
	st, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	data, err := reg.ExportProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec.RestoreTID = 1 // the host tid before a CRIU restore
	stale, _ := json.Marshal(rec)
	if err := reg.ImportProcess(pid, st, stale); err != nil {
		t.Fatal(err)
	}
	if got, err := reg.RestoreThreadID(pid); err != nil || got != tid {
		t.Fatalf("restore thread after import = %d, %v; want %d", got, err, tid)
	}
	rec.RestoreNSTID = 1 << 30 // no such thread
	lost, _ := json.Marshal(rec)
	if err := reg.ImportProcess(pid, st, lost); !errors.Is(err, ErrNoRestoreThread) {
		t.Fatalf("import without its restore thread: %v, want ErrNoRestoreThread", err)
	}
}
