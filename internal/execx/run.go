package execx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
)

// Capture limits and the grace given to output pipes after a kill.
const (
	MaxStdout = 1 << 20 // bytes of stdout kept (the head)
	MaxStderr = 4 << 10 // bytes of stderr kept (the tail)
	waitDelay = 2 * time.Second
	maxCmdLen = 200
)

// MinimalEnv is the environment a command gets when Cmd.Env is nil.
var MinimalEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C"}

// Cmd is one command to run.
type Cmd struct {
	Path  string   // binary: absolute, or looked up on PATH
	Args  []string // arguments, without argv[0]
	Env   []string // nil: MinimalEnv
	Dir   string   // working directory; "": the caller's
	Stdin []byte   // nil: /dev/null
}

// Result is what a command printed and how long it ran.
type Result struct {
	Stdout   []byte // at most MaxStdout bytes, the head
	Stderr   []byte // at most MaxStderr bytes, the tail
	Duration time.Duration
}

// Run runs c to completion under ctx. The command gets its own process
// group, which is killed as a whole when ctx ends (and when the caller's
// thread dies, through Pdeathsig). A non-zero exit gives an *ExitError, a
// missing binary an error matching ErrNotFound, and the end of ctx an error
// matching ctx.Err(); the Result holds whatever was captured in every case.
func Run(ctx context.Context, c Cmd) (Result, error) {
	name := describe(c)
	cmd := exec.CommandContext(ctx, c.Path, c.Args...)
	cmd.Env = c.Env
	if cmd.Env == nil {
		cmd.Env = MinimalEnv
	}
	cmd.Dir = c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	stdout := &headBuffer{max: MaxStdout}
	stderr := &tailBuffer{max: MaxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The group id is the leader's pid (Setpgid with Pgid 0).
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cmd.WaitDelay = waitDelay

	start := time.Now()
	err := cpuaffinity.StartOn("", cmd.Start)
	if err == nil {
		err = cmd.Wait()
	}
	res := Result{Stdout: stdout.buf, Stderr: stderr.buf, Duration: time.Since(start)}
	if err == nil || (errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success()) {
		return res, nil
	}
	tail := strings.TrimSpace(string(stderr.buf))
	if cerr := ctx.Err(); cerr != nil && cmd.Process != nil {
		return res, fmt.Errorf("%s: %w after %v (stderr %q)", name, cerr, res.Duration.Round(time.Millisecond), tail)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		e := &ExitError{Cmd: name, Status: exitErr.ExitCode(), Stderr: tail}
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.Signal = unix.SignalName(ws.Signal())
		}
		return res, e
	}
	if cmd.Process == nil && notFound(err) {
		return res, fmt.Errorf("%s: %w: %w", name, ErrNotFound, err)
	}
	return res, fmt.Errorf("%s: %w", name, err)
}

// notFound reports whether a start error means the binary is missing or not
// executable.
func notFound(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) ||
		errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ENOEXEC) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// LookPath finds the binary name on the caller's PATH; a miss matches
// ErrNotFound.
func LookPath(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s: %w: %w", name, ErrNotFound, err)
	}
	return path, nil
}

// describe renders the command line for errors, quoting arguments that need
// it and shortening the whole to maxCmdLen bytes.
func describe(c Cmd) string {
	parts := make([]string, 0, 1+len(c.Args))
	for _, a := range append([]string{c.Path}, c.Args...) {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	s := strings.Join(parts, " ")
	if len(s) > maxCmdLen {
		s = s[:maxCmdLen-3] + "..."
	}
	return s
}
