package sandbox

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

func TestMain(m *testing.M) {
	if IsSupervisor() {
		os.Exit(Main())
	}
	if IsExecStage() {
		os.Exit(ExecMain())
	}
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// tree is one supervised tree under test, in a directory every user may
// enter (the supervisor binary is a copy of this test binary there).
type tree struct {
	t      *testing.T
	dir    string
	bin    string
	log    *os.File
	status *os.File
	home   string
}

func newTree(t *testing.T) *tree {
	t.Helper()
	testutil.RequiresRoot(t)
	dir, err := os.MkdirTemp("", "sandbox-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "supervisor")
	copyFile(t, exe, bin, 0o755)
	private := filepath.Join(dir, "private")
	home := filepath.Join(private, "home")
	for _, d := range []string{private, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.OpenFile(filepath.Join(private, "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.OpenFile(filepath.Join(private, "status"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close(); status.Close() })
	return &tree{t: t, dir: dir, bin: bin, log: log, status: status, home: home}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func (tr *tree) logPath() string { return filepath.Join(tr.dir, "private", "log") }

// spec runs argv as root in the test's directory.
func (tr *tree) spec(argv ...string) Spec {
	return Spec{SupervisorPath: tr.bin, Mark: "GPUSCHED_SOCKET=/test", Argv: argv, Env: []string{"PATH=/usr/bin:/bin"},
		Dir: tr.dir, Cred: Cred{Groups: []uint32{}}, Home: tr.home, Log: tr.log, Status: tr.status}
}

// wait reaps the supervisor and returns its exit report.
func (tr *tree) wait(st *Started) ExitReport {
	tr.t.Helper()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(st.InitPID, &ws, 0, nil); err != nil {
		tr.t.Fatal(err)
	}
	unix.Close(st.Pidfd)
	r, err := ReadExitReport(filepath.Join(tr.dir, "private", "status"))
	if err != nil {
		tr.t.Fatal(err)
	}
	return r
}

func (tr *tree) logText() string {
	b, _ := os.ReadFile(tr.logPath())
	return string(b)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestStartRunsCommandInOwnNamespace(t *testing.T) {
	tr := newTree(t)
	var recorded int
	// What libcuda's cuInit reads: /proc/self/task/<gettid()>/comm, with
	// the tid as the command's own namespace numbers it (mountns.go).
	s := tr.spec("sh", "-c", "grep NSpid /proc/self/status; cat /proc/$$/task/$$/comm")
	s.Recorded = func(pid int, start uint64) error { recorded = pid; return nil }
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	if recorded != st.InitPID || st.PID == st.InitPID || st.PID <= 0 {
		t.Fatalf("recorded %d, started %+v", recorded, st)
	}
	r := tr.wait(st)
	if r.Code == nil || *r.Code != 0 {
		t.Fatalf("report %+v, want code 0; log %q", r, tr.logText())
	}
	// The command's /proc is its own namespace's: NSpid names it by its
	// namespace pid alone, and its own directory there is its own.
	f := strings.Fields(tr.logText())
	if len(f) != 3 || f[1] == strconv.Itoa(st.PID) || f[2] != "sh" {
		t.Fatalf("log %q: command (host pid %d) does not see a /proc of its own PID namespace", tr.logText(), st.PID)
	}
}

func TestExitCodeIsReported(t *testing.T) {
	tr := newTree(t)
	st, err := Start(ctx(t), tr.spec("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	if r := tr.wait(st); r.Code == nil || *r.Code != 3 {
		t.Fatalf("report %+v, want code 3", r)
	}
}

func TestStartMissingCommand(t *testing.T) {
	tr := newTree(t)
	_, err := Start(ctx(t), tr.spec("no-such-command-xyz"))
	if !errors.Is(err, ErrCommand) || !strings.Contains(err.Error(), "no-such-command-xyz") {
		t.Fatalf("err = %v, want ErrCommand naming the command", err)
	}
	r, err := ReadExitReport(filepath.Join(tr.dir, "private", "status"))
	if err != nil || !strings.Contains(r.Error, "not found") {
		t.Fatalf("report %+v, %v", r, err)
	}
}

// TestSilentSupervisorFailsAtTheDeadline: a supervisor that never answers
// the handshake (its caller stopped it, as any caller may) fails the
// start at the call's deadline, and is killed. The read was blocking, its
// deadline ignored: the start, the caller's kill of it and the daemon's
// shutdown waited for good.
func TestSilentSupervisorFailsAtTheDeadline(t *testing.T) {
	tr := newTree(t)
	silent := filepath.Join(tr.dir, "silent")
	if err := os.WriteFile(silent, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := tr.spec("true")
	s.SupervisorPath = silent
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := Start(c, s)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a silent supervisor started")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the start still waits on a silent supervisor 30 s past its deadline")
	}
}

func TestRecordFailureStartsNothing(t *testing.T) {
	tr := newTree(t)
	marker := filepath.Join(tr.dir, "ran")
	s := tr.spec("touch", marker)
	s.Recorded = func(int, uint64) error { return errors.New("disk full") }
	if _, err := Start(ctx(t), s); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("command ran although its record was not written")
	}
}

func TestTermIsForwardedToWholeTree(t *testing.T) {
	tr := newTree(t)
	// The shell waits on a background sleep; both must get SIGTERM.
	st, err := Start(ctx(t), tr.spec("sh", "-c", `sleep 1000 & echo up; wait`))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.PidfdSendSignal(st.Pidfd, unix.SIGTERM, nil, 0); err != nil {
		t.Fatal(err)
	}
	r := tr.wait(st)
	if r.Signal != int(unix.SIGTERM) {
		t.Fatalf("report %+v, want signal TERM", r)
	}
}

func TestNiceAppliesToCommand(t *testing.T) {
	tr := newTree(t)
	s := tr.spec("sh", "-c", `cut -d" " -f19 /proc/self/stat`)
	s.Nice = 7
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	tr.wait(st)
	if got := strings.TrimSpace(tr.logText()); got != "7" {
		t.Fatalf("nice of command = %q, want 7", got)
	}
}

// TestOOMScoreAdjAppliesToCommand: the command and what it forks run at
// the spec's oom_score_adj, not this process's; one outside the kernel's
// range starts nothing.
func TestOOMScoreAdjAppliesToCommand(t *testing.T) {
	tr := newTree(t)
	s := tr.spec("sh", "-c", `sh -c 'cat /proc/self/oom_score_adj'`)
	s.OOMScoreAdj = 345
	st, err := Start(ctx(t), s)
	if err != nil {
		t.Fatal(err)
	}
	tr.wait(st)
	if got := strings.TrimSpace(tr.logText()); got != "345" {
		t.Fatalf("oom_score_adj of the command's child = %q, want 345", got)
	}
	s.OOMScoreAdj = 1001
	if st, err := Start(ctx(t), s); err == nil {
		tr.wait(st)
		t.Fatal("Start with oom_score_adj 1001: no error")
	}
}
