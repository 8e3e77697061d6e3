package execx

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cmd        Cmd
		stdout     string
		stderr     string
		status     int    // 0: success
		signal     string // with status -1
		errContain string
	}{
		{name: "stdout", cmd: Cmd{Path: "sh", Args: []string{"-c", "echo hello; echo oops >&2"}}, stdout: "hello\n", stderr: "oops\n"},
		{name: "stdin", cmd: Cmd{Path: "cat", Stdin: []byte("in put")}, stdout: "in put"},
		{name: "no stdin", cmd: Cmd{Path: "cat"}, stdout: ""},
		{name: "dir", cmd: Cmd{Path: "pwd", Dir: "/usr"}, stdout: "/usr\n"},
		{name: "minimal env", cmd: Cmd{Path: "sh", Args: []string{"-c", "env | sort"}},
			stdout: "LANG=C\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nPWD=" + mustWd(t) + "\n"},
		{name: "given env", cmd: Cmd{Path: "/bin/sh", Args: []string{"-c", "echo $FOO"}, Env: []string{"FOO=bar"}}, stdout: "bar\n"},
		{name: "exit status", cmd: Cmd{Path: "sh", Args: []string{"-c", "echo partial; echo 'it broke' >&2; exit 3"}},
			stdout: "partial\n", stderr: "it broke\n", status: 3, errContain: `exit status 3: "it broke"`},
		{name: "signal", cmd: Cmd{Path: "sh", Args: []string{"-c", "kill -TERM $$"}}, status: -1, signal: "SIGTERM",
			errContain: "killed by SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), tc.cmd)
			if got := string(res.Stdout); got != tc.stdout {
				t.Errorf("stdout %q, want %q", got, tc.stdout)
			}
			if got := string(res.Stderr); got != tc.stderr {
				t.Errorf("stderr %q, want %q", got, tc.stderr)
			}
			if res.Duration <= 0 {
				t.Errorf("duration %v", res.Duration)
			}
			if tc.status == 0 {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			var ee *ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("Run error %v (%T), want *ExitError", err, err)
			}
			if ee.Status != tc.status || ee.Signal != tc.signal {
				t.Errorf("ExitError %+v, want status %d signal %q", ee, tc.status, tc.signal)
			}
			if ee.Stderr != strings.TrimSpace(tc.stderr) {
				t.Errorf("ExitError.Stderr %q", ee.Stderr)
			}
			if !strings.Contains(err.Error(), tc.errContain) || !strings.HasPrefix(err.Error(), tc.cmd.Path+" ") {
				t.Errorf("error %q lacks the command or %q", err, tc.errContain)
			}
		})
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

func TestCaptureBounds(t *testing.T) {
	// 3 MiB of stdout and 8 KiB of stderr ending with a marker.
	script := "head -c 3145728 /dev/zero; i=0; while [ $i -lt 1024 ]; do printf 'xxxxxxx\\n' >&2; i=$((i+1)); done; echo END >&2; exit 1"
	res, err := Run(context.Background(), Cmd{Path: "sh", Args: []string{"-c", script}})
	var ee *ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Stdout) != MaxStdout {
		t.Errorf("stdout kept %d bytes, want %d", len(res.Stdout), MaxStdout)
	}
	if len(res.Stderr) != MaxStderr || !bytes.HasSuffix(res.Stderr, []byte("xxxxxxx\nEND\n")) {
		t.Errorf("stderr kept %d bytes ending %q, want the last %d", len(res.Stderr), res.Stderr[len(res.Stderr)-12:], MaxStderr)
	}
	if !strings.HasSuffix(ee.Stderr, "END") {
		t.Errorf("ExitError.Stderr does not end with the tail: %q", ee.Stderr[len(ee.Stderr)-20:])
	}
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 5}
	for _, w := range []string{"ab", "cd", "efg", "", "hijklmnop", "q"} {
		b.Write([]byte(w))
	}
	if got := string(b.buf); got != "mnopq" {
		t.Errorf("tail = %q, want mnopq", got)
	}
}

func TestNotFound(t *testing.T) {
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"gpusched-no-such-binary", filepath.Join(dir, "missing"), dir, noexec} {
		_, err := Run(context.Background(), Cmd{Path: path, Args: []string{"x"}})
		if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), path) {
			t.Errorf("Run(%s): %v, want ErrNotFound naming it", path, err)
		}
	}
	if _, err := LookPath("gpusched-no-such-binary"); !errors.Is(err, ErrNotFound) {
		t.Errorf("LookPath of a missing binary: %v", err)
	}
	if p, err := LookPath("sh"); err != nil || !filepath.IsAbs(p) {
		t.Errorf("LookPath(sh) = %q, %v", p, err)
	}
}

// TestDeadlineKillsGroup runs a shell that starts a background sleep holding
// stdout, then waits: the deadline must kill both, promptly.
func TestDeadlineKillsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Run(ctx, Cmd{Path: "sh", Args: []string{"-c", "sleep 60 & echo $! > " + pidFile + "; echo started >&2; wait"}})
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %v after a 200ms deadline", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "sh -c") ||
		!strings.Contains(err.Error(), "started") {
		t.Errorf("error %v: want DeadlineExceeded naming the command and quoting stderr", err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	// The sleep was killed; once its parent is gone it is reaped by init,
	// so wait for that rather than for a fixed time.
	for deadline := time.Now().Add(10 * time.Second); ; {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil || !bytes.Contains(stat, []byte("(sleep)")) || bytes.Contains(stat, []byte(") Z ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("background sleep %d survived the deadline", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCancelBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, Cmd{Path: "true"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a done context: %v", err)
	}
}

func TestOwnProcessGroup(t *testing.T) {
	res, err := Run(context.Background(), Cmd{Path: "sh", Args: []string{"-c", "echo $$; ps -o pgid= -p $$"}})
	if err != nil {
		t.Skipf("ps unavailable: %v", err)
	}
	f := strings.Fields(string(res.Stdout))
	if len(f) != 2 || f[0] != f[1] {
		t.Errorf("pid and pgid %q: want the command to lead its own group", f)
	}
	if f[1] == strconv.Itoa(syscall.Getpgrp()) {
		t.Error("command shares the test's process group")
	}
}

func TestDescribeShortens(t *testing.T) {
	got := describe(Cmd{Path: "/bin/x", Args: []string{"a b", "", strings.Repeat("y", 300)}})
	if !strings.HasPrefix(got, `/bin/x "a b" "" yyy`) || len(got) != maxCmdLen || !strings.HasSuffix(got, "...") {
		t.Errorf("describe = %q (%d bytes)", got, len(got))
	}
}

// TestRunOnTheUsersCPUs: under --daemon-cpus a tool (cuda-checkpoint for a
// user's freeze, the MPS control daemon) is born on the CPUs the daemon
// gives users, and this process's threads stay on its own.
func TestRunOnTheUsersCPUs(t *testing.T) {
	daemonCPUs, userCPUs := testutil.ConfineSelf(t)
	res, err := Run(context.Background(), Cmd{Path: "grep", Args: []string{"Cpus_allowed_list", "/proc/self/status"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(res.Stdout)), "Cpus_allowed_list:\t"+userCPUs; got != want {
		t.Errorf("the tool saw %q, want %q", got, want)
	}
	testutil.WantThreadsOn(t, "this process", os.Getpid(), daemonCPUs)
}
