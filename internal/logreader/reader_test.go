package logreader

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreply"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestMain lets the test binary be its own log reader, as the daemon's
// binary is.
func TestMain(m *testing.M) {
	if IsReader() {
		os.Exit(Main())
	}
	os.Exit(m.Run())
}

// callerIn starts a real unprivileged user's process in cgroups of its
// own, made in every hierarchy this package places readers in, and
// returns where it is.
func callerIn(t *testing.T) Cgroups {
	t.Helper()
	u := testutil.NewUser(t, "gslogrd", "gslogread")
	m, err := hostMounts()
	if err != nil {
		t.Fatal(err)
	}
	name := "gslogreader-" + strconv.Itoa(os.Getpid())
	var dirs []string
	for _, at := range []string{m.unified, m.cpu, m.cpuacc} {
		if at == "" || slices.Contains(dirs, filepath.Join(at, name)) {
			continue
		}
		dir := filepath.Join(at, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
		dirs = append(dirs, dir)
		t.Cleanup(func() { os.Remove(dir) }) // after the process is gone (cleanups run last first)
	}
	if len(dirs) == 0 {
		t.Skip("no CPU cgroup hierarchy mounted")
	}
	cmd := exec.Command("sleep", "1000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, dir := range dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		if dir != c.Unified && !slices.Contains(c.V1, dir) {
			t.Fatalf("the caller is in %+v, not in %s", c, dir)
		}
	}
	return c
}

func self(t *testing.T) Cgroups {
	t.Helper()
	c, err := Of(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logOf writes a log of lines and returns its path.
func logOf(t *testing.T, lines int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	var b bytes.Buffer
	for i := range lines {
		b.WriteString("line \"" + strconv.Itoa(i) + "\"\t\xff\n")
	}
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestReadOnTheCallersCPUs: a reader runs on the CPUs it is given (its
// caller's), not on all of its starter's. Before
// TestReadPlacesTheReaderInTheCallersCgroups, which confines this process
// for good (after it, these CPUs are all the users' anyway).
func TestReadOnTheCallersCPUs(t *testing.T) {
	_, cpus := testutil.CPUsApart(t)
	r := Reader{Exe: os.Args[0], started: func(pid int) { testutil.WantThreadsOn(t, "the reader", pid, cpus) }}
	if _, err := r.Read(context.Background(), callerIn(t), cpus, Request{Name: "job", Path: logOf(t, 3), Lines: -1}); err != nil {
		t.Fatal(err)
	}
}

// TestReadPlacesTheReaderInTheCallersCgroups: a reader is born off the
// daemon's own CPUs (--daemon-cpus) and is in the caller's cgroups, in
// every hierarchy, before it has its request, and its reply is the one
// the daemon would encode itself.
func TestReadPlacesTheReaderInTheCallersCgroups(t *testing.T) {
	_, userCPUs := testutil.ConfineSelf(t)
	caller := callerIn(t)
	if err := Apart(caller); err != nil {
		t.Fatalf("Apart of the caller's cgroups: %v", err)
	}
	var placed Cgroups
	r := Reader{Exe: os.Args[0], started: func(pid int) {
		c, err := Of(pid)
		if err != nil {
			t.Error(err)
		}
		placed = c
		testutil.WantThreadsOn(t, "the reader", pid, userCPUs)
	}}
	path := logOf(t, 3*logreply.Chunk+5)
	got, err := r.Read(context.Background(), caller, "", Request{Name: "job", Path: path, Lines: -1})
	if err != nil {
		t.Fatal(err)
	}
	if placed.Unified != caller.Unified || !slices.Equal(placed.V1, caller.V1) {
		t.Fatalf("the reader was in %+v, the caller in %+v", placed, caller)
	}
	tl, err := logfile.Tail(context.Background(), path, -1, 0)
	if err != nil {
		t.Fatal(err)
	}
	want, err := logreply.Encode(context.Background(), "job", tl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("reply of %d bytes differs from the daemon's own encoding (%d bytes)", len(got), len(want))
	}
}

// TestReadLeavesTheDaemonsOwnCgroupsToIt: a caller where the daemon is is
// not apart, and Read gives ErrNotApart without starting a reader.
func TestReadLeavesTheDaemonsOwnCgroupsToIt(t *testing.T) {
	if err := Apart(self(t)); !errors.Is(err, ErrNotApart) {
		t.Fatalf("Apart of this process's own cgroups: %v, want ErrNotApart", err)
	}
	started := false
	r := Reader{Exe: os.Args[0], started: func(int) { started = true }}
	if _, err := r.Read(context.Background(), self(t), "", Request{Name: "job", Path: logOf(t, 1), Lines: -1}); !errors.Is(err, ErrNotApart) || started {
		t.Fatalf("err %v, started %v; want ErrNotApart and none started", err, started)
	}
}

// TestReadBoundsTheReply: a reader that writes without end is cut off at
// MaxReply and killed.
func TestReadBoundsTheReply(t *testing.T) {
	caller := callerIn(t)
	yes, err := exec.LookPath("yes")
	if err != nil {
		t.Skip(err)
	}
	var pid int
	r := Reader{Exe: yes, started: func(p int) { pid = p }}
	if _, err := r.Read(context.Background(), caller, "", Request{}); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("err %v, want the reply refused as over the bound", err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("reader %d after Read: %v, want it gone", pid, err)
	}
}

// TestReadEndsWithTheCall: a reader still at work when the call ends (it
// would open a FIFO nobody writes, for ever) is killed, and Read returns
// the call's error.
func TestReadEndsWithTheCall(t *testing.T) {
	caller := callerIn(t)
	fifo := filepath.Join(t.TempDir(), "log")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var pid int
	r := Reader{Exe: os.Args[0], started: func(p int) { pid = p; cancel() }}
	if _, err := r.Read(ctx, caller, "", Request{Name: "job", Path: fifo, Lines: -1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Fatalf("reader %d after Read: %v, want it gone", pid, err)
	}
}

// TestReaderNamesItsThreads: a reader's threads, waiting for their
// request, show as gpusched-reader, not as the binary they were started
// from.
func TestReaderNamesItsThreads(t *testing.T) {
	caller := callerIn(t)
	var names []string
	r := Reader{Exe: os.Args[0], started: func(pid int) {
		names = threadNames(t, pid)
	}}
	if _, err := r.Read(context.Background(), caller, "", Request{Name: "job", Path: logOf(t, 3), Lines: -1}); err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 || slices.ContainsFunc(names, func(n string) bool { return n != Comm }) {
		t.Fatalf("the reader's threads were named %q, want all %q", names, Comm)
	}
}

// threadNames gives the names of pid's threads once they all have the
// reader's name (it names them first thing), or as they are after 10 s.
func threadNames(t *testing.T, pid int) []string {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, task := range tasks {
			b, err := os.ReadFile(dir + task.Name() + "/comm")
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, strings.TrimSpace(string(b)))
		}
		if !slices.ContainsFunc(names, func(n string) bool { return n != Comm }) || time.Now().After(deadline) {
			return names
		}
	}
}
