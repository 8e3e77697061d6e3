package simgpu

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// nobody is a uid that owns nothing on the test machine.
const nobody = 65534

func TestAddUserModes(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := newTestRegistry(t, 1, 1024)
	if err := reg.AddUser(nobody); err != nil {
		t.Fatal(err)
	}
	// The user cannot loosen or tighten them for good: AddUser puts them back.
	if err := os.Chmod(reg.userDir(nobody), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := reg.AddUser(nobody); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]fs.FileMode{reg.userDir(nobody): fs.ModeDir | 0o755, reg.lockPath(nobody): 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; fi.Mode() != want || uid != nobody {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", path, fi.Mode(), uid, want, nobody)
		}
	}
}

// TestUntrustedRecordsIgnored: a record counts only when its file, its
// directory and the process it names belong to one user; the others are
// left out of the usage, said so, and kept (they are not garbage).
func TestUntrustedRecordsIgnored(t *testing.T) {
	testutil.RequiresRoot(t)
	pid, st := self(t) // runs as root
	for _, tc := range []struct {
		name      string
		dir, file uint32 // uids of the record's directory and file
		why       string
	}{
		{"names another user's process", nobody, nobody, fmt.Sprintf("names pid %d, which runs as uid 0", pid)},
		{"file of another user", 0, nobody, fmt.Sprintf("owned by uid %d", nobody)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newTestRegistry(t, 1, 1024)
			for _, uid := range []uint32{tc.dir, tc.file} {
				if err := reg.AddUser(uid); err != nil {
					t.Fatal(err)
				}
			}
			rec := newRecord(pid, st)
			rec.Usage[DeviceUUID(0)] = 500
			if err := reg.writeRecord(tc.file, rec); err != nil {
				t.Fatal(err)
			}
			if tc.dir != tc.file {
				if err := os.Rename(reg.recordPath(tc.file, pid), reg.recordPath(tc.dir, pid)); err != nil {
					t.Fatal(err)
				}
			}
			snap := snapshot(t, reg)
			if usedOn(snap, DeviceUUID(0)) != 0 || len(snap.Procs) != 0 {
				t.Errorf("untrusted record counted: %+v", snap)
			}
			want := fmt.Sprintf("procs/%d/%d.json: %s", tc.dir, pid, tc.why)
			if len(snap.Untrusted) != 1 || snap.Untrusted[0] != want {
				t.Errorf("Untrusted = %q, want [%q]", snap.Untrusted, want)
			}
			if !fileExists(t, reg.recordPath(tc.dir, pid)) {
				t.Error("untrusted record removed")
			}
			// Nor is it the process's own record to the checkpoint calls.
			if _, err := reg.CheckpointState(pid); !errors.Is(err, ErrNoCUDA) {
				t.Errorf("CheckpointState over an untrusted record: %v, want ErrNoCUDA", err)
			}
		})
	}
}

func fileExists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Lstat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// TestLockWaitBounded: with a wait limit, a call waits that long for a
// user's lock held elsewhere, then fails naming the user; another user's
// calls do not wait at all.
func TestLockWaitBounded(t *testing.T) {
	testutil.RequiresRoot(t)
	reg := newTestRegistry(t, 1, 1024)
	reg.SetLockWait(50 * time.Millisecond)
	if err := reg.AddUser(nobody); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan bool)
	go func() { done <- reg.tryLockedUser(nobody, func() { close(held); <-release }) }()
	<-held
	err := reg.BetweenCalls(nobody, func() { t.Error("BetweenCalls ran while the user's lock was held") })
	if !errors.Is(err, ErrLockHeld) || !strings.Contains(err.Error(), fmt.Sprintf("uid %d", nobody)) {
		t.Errorf("BetweenCalls of the held user: %v, want ErrLockHeld naming uid %d", err, nobody)
	}
	ran := false
	if err := reg.BetweenCalls(0, func() { ran = true }); err != nil || !ran {
		t.Errorf("BetweenCalls of another user: ran %v, %v", ran, err)
	}
	close(release)
	if !<-done {
		t.Fatal("the lock was not free to take")
	}
	if err := reg.BetweenCalls(nobody, func() { ran = true }); err != nil {
		t.Errorf("BetweenCalls once the lock is free: %v", err)
	}
}

// TestNoUserDir: a user the daemon has not set up cannot register.
func TestNoUserDir(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := sharedDir(t)
	reg, err := Create(filepath.Join(dir, "sim"), Devices(1, 1024))
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	h := startHelperAs(t, nobody, nobody, &stderr, "alloc", helperDir+"="+reg.Dir(), helperUUID+"="+DeviceUUID(0))
	if got := h.line(t); got != "ready" {
		t.Fatalf("helper said %q, want ready", got)
	}
	if _, err := fmt.Fprintln(h.stdin, "go"); err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Wait(); err == nil || !strings.Contains(stderr.String(), ErrNoUserDir.Error()) {
		t.Errorf("allocation by a user without a directory: %v: %s", err, stderr.String())
	}
}

// TestCrossUserAllocationsNeverOversubscribe: processes of two users,
// whose calls do not wait for each other, allocate until out of memory at
// the same time; the device is never oversubscribed, and each process's
// record holds what it was granted.
func TestCrossUserAllocationsNeverOversubscribe(t *testing.T) {
	const total = 300
	users := []testutil.User{testutil.NewUser(t, "gspolsim1", "gspol"), testutil.NewUser(t, "gspolsim2", "gspol")}
	reg, err := Create(filepath.Join(sharedDir(t), "sim"), Devices(1, total))
	if err != nil {
		t.Fatal(err)
	}
	uuid := DeviceUUID(0)
	var helpers []*helperProc
	for _, u := range users {
		if err := reg.AddUser(u.UID); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			h := startHelperAs(t, u.UID, u.GID, nil, "alloc", helperDir+"="+reg.Dir(), helperUUID+"="+uuid)
			if got := h.line(t); got != "ready" {
				t.Fatalf("helper said %q, want ready", got)
			}
			helpers = append(helpers, h)
		}
	}
	for _, h := range helpers {
		if _, err := fmt.Fprintln(h.stdin, "go"); err != nil {
			t.Fatal(err)
		}
	}
	granted := map[int]uint64{}
	var sum uint64
	for _, h := range helpers {
		var n uint64
		if _, err := fmt.Sscanf(h.line(t), "count %d", &n); err != nil {
			t.Fatal(err)
		}
		granted[h.cmd.Process.Pid] = n
		sum += n
	}
	snap := snapshot(t, reg)
	if used := usedOn(snap, uuid); sum > total || used != sum {
		t.Errorf("granted %d MiB of %d, registry shows %d used", sum, total, used)
	}
	for _, p := range snap.Procs {
		if p.UsedMiB != granted[p.PID] {
			t.Errorf("pid %d: registry has %d MiB, it was granted %d", p.PID, p.UsedMiB, granted[p.PID])
		}
	}
	if len(snap.Untrusted) != 0 {
		t.Errorf("untrusted: %v", snap.Untrusted)
	}
}

// sharedDir is a temporary directory every user may enter.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "simgpu-users")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startHelperAs starts the test binary in a helper mode as uid, from a copy
// that uid may run, with its stderr to stderr (the test's when nil).
func startHelperAs(t *testing.T, uid, gid uint32, stderr io.Writer, mode string, env ...string) *helperProc {
	t.Helper()
	exe := filepath.Join(sharedDir(t), "simgpu.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := helperCmd(mode, env...)
	cmd.Path, cmd.Args[0] = exe, exe
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	cmd.Stderr = stderr
	return startCmd(t, cmd)
}
