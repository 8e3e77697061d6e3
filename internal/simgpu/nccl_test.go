package simgpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
)

// ncclMember starts a helper process that joins NCCL group (none when "")
// and holds 10 MiB on GPU 0.
func ncclMember(t *testing.T, reg *Registry, group string) int {
	t.Helper()
	h := startHelper(t, "wait")
	pid := h.cmd.Process.Pid
	st, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.SetNCCL(pid, st, group); err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(pid, st, DeviceUUID(0), 10); err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestNCCLLockWaitsForPeer models NVIDIA/cuda-checkpoint#30: a lock of an
// NCCL group's member waits while another member is locked, fails with
// ErrTimeout when its timeout passes first, and goes through once the
// other is unlocked.
func TestNCCLLockWaitsForPeer(t *testing.T) {
	reg := newTestRegistry(t, 1, 4096)
	a, b := ncclMember(t, reg, "job"), ncclMember(t, reg, "job")
	other, loner := ncclMember(t, reg, "other-job"), ncclMember(t, reg, "")
	if err := reg.LockProcess(a); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := reg.LockProcessContext(ctx, b, 0)
	cancel()
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "cuda-checkpoint#30") {
		t.Fatalf("lock of a member while its peer is locked: %v, want ErrTimeout citing #30", err)
	}
	mustState(t, reg, b, StateRunning)

	for _, pid := range []int{other, loner} {
		if err := reg.LockProcess(pid); err != nil {
			t.Errorf("lock of process %d outside the group: %v", pid, err)
		}
	}

	done := make(chan error, 1)
	go func() { done <- reg.LockProcess(b) }()
	if err := reg.UnlockProcess(a); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("lock after the peer's unlock: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lock still waiting 30s after the peer's unlock")
	}
	mustState(t, reg, b, StateLocked)

	// The wait goes both ways, and a checkpointed peer blocks as a locked one.
	if _, err := reg.CheckpointProcess(b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := reg.LockProcessContext(ctx, a, 0); !errors.Is(err, ErrTimeout) {
		t.Errorf("lock while the peer is checkpointed: %v, want ErrTimeout", err)
	}
}

func TestNCCLGroupKeepsRecord(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if err := reg.SetNCCL(pid, st, strings.Repeat("x", maxGroupLen+1)); err == nil {
		t.Error("SetNCCL took an overlong group name")
	}
	if err := reg.SetNCCL(pid, st, "job"); err != nil {
		t.Fatal(err)
	}
	snapshot(t, reg) // prunes garbage
	if !recordExists(t, reg, pid) {
		t.Fatal("record of an NCCL member without memory was removed")
	}
	if err := reg.SetNCCL(pid, st, ""); err != nil {
		t.Fatal(err)
	}
	if recordExists(t, reg, pid) {
		t.Error("empty record kept after leaving the group")
	}
}

// TestActionsWaitOnAFrozenOrStoppedProcess: every driver action on a
// process whose cgroup is frozen, or that is stopped, waits, as on a lent
// H200 (see awaitRunnable): get-state, lock (past its own timeout),
// checkpoint and unlock fail with ErrTimeout only when their caller gives
// up, the state unchanged, and go through once the process runs again.
// The process's own view of its state does not wait.
func TestActionsWaitOnAFrozenOrStoppedProcess(t *testing.T) {
	holds := map[string]func(t *testing.T, pid int) (release func()){"frozen": freezeAlone, "stopped": stopAlone}
	for _, tc := range []struct {
		action, from, to string
		act              func(ctx context.Context, reg *Registry, pid int) error
	}{
		{"get-state", StateRunning, StateRunning, func(ctx context.Context, reg *Registry, pid int) error {
			_, err := reg.CheckpointStateContext(ctx, pid)
			return err
		}},
		{"lock", StateRunning, StateLocked, func(ctx context.Context, reg *Registry, pid int) error {
			return reg.LockProcessContext(ctx, pid, time.Millisecond)
		}},
		{"checkpoint", StateLocked, StateCheckpointed, func(ctx context.Context, reg *Registry, pid int) error {
			_, err := reg.CheckpointProcessContext(ctx, pid)
			return err
		}},
		{"unlock", StateLocked, StateRunning, func(ctx context.Context, reg *Registry, pid int) error {
			return reg.UnlockProcessContext(ctx, pid)
		}},
	} {
		for name, hold := range holds {
			t.Run(tc.action+"/"+name, func(t *testing.T) {
				reg := newTestRegistry(t, 1, 4096)
				pid := ncclMember(t, reg, "")
				if tc.from == StateLocked {
					if err := reg.LockProcess(pid); err != nil {
						t.Fatal(err)
					}
				}
				release := hold(t, pid)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				err := tc.act(ctx, reg, pid)
				cancel()
				if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), tc.action+": ") || !strings.Contains(err.Error(), name) {
					t.Fatalf("%s of a %s process: %v, want ErrTimeout saying it is %s", tc.action, name, err, name)
				}
				mustState(t, reg, pid, tc.from)
				done := make(chan error, 1)
				go func() { done <- tc.act(context.Background(), reg, pid) }()
				release()
				if err := <-done; err != nil {
					t.Fatalf("%s once the process runs again: %v", tc.action, err)
				}
				mustState(t, reg, pid, tc.to)
			})
		}
	}
}

// stopAlone stops process pid (SIGSTOP), waiting until it is; release
// continues it, as does the end of t.
func stopAlone(t *testing.T, pid int) (release func()) {
	t.Helper()
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cont)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if st, err := threadState(pid, pid); err == nil && stopped(st) {
			return cont
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d never stopped", pid)
		}
	}
}

// freezeAlone moves process pid into a cgroup of its own and freezes it,
// waiting until it is frozen; thaw thaws it. When t ends it is thawed and
// moved back to the root cgroup, so that the cgroup can go.
func freezeAlone(t *testing.T, pid int) (thaw func()) {
	t.Helper()
	mnt, top := testutil.CgroupTop(t)
	dir := filepath.Join(top, "frozen")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	freeze := func(v string) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.freeze"), []byte(v), 0); err != nil {
			t.Error(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
	freeze("1")
	t.Cleanup(func() {
		freeze("0")
		os.WriteFile(filepath.Join(mnt, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
	})
	for deadline := time.Now().Add(10 * time.Second); !cgroup.Frozen(dir); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never froze", dir)
		}
	}
	return func() { freeze("0") }
}
