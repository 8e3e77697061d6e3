package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/execx"
)

// lockGrace is how long a lock may run past its --timeout when the caller
// set no deadline.
const lockGrace = 5 * time.Second

// CLIOptions configures NewCLI.
type CLIOptions struct {
	Path string // cuda-checkpoint binary; "": looked up on PATH
}

// CLI drives NVIDIA's cuda-checkpoint tool, one process per call, through
// execx. What the tool supports is probed once, from its --help.
type CLI struct {
	path string
	env  []string
	caps Caps
}

var _ Driver = (*CLI)(nil)

// NewCLI finds cuda-checkpoint and probes its features. A missing tool, one
// that cannot load the driver library, or one without --action (before
// driver 555) gives ErrUnsupported.
//
// The tool runs with execx's minimal environment plus the daemon's
// LD_LIBRARY_PATH: it is linked against libcuda.so.1, which containers and
// private driver installs keep outside the loader's default paths.
func NewCLI(ctx context.Context, opts CLIOptions) (*CLI, error) {
	path, err := resolve(opts.Path)
	if err != nil {
		return nil, err
	}
	c := &CLI{path: path, env: toolEnv()}
	res, err := execx.Run(ctx, execx.Cmd{Path: path, Args: []string{"--help"}, Env: c.env})
	help := string(res.Stdout) + string(res.Stderr)
	switch {
	case errors.Is(err, execx.ErrNotFound):
		return nil, fmt.Errorf("cuda-checkpoint at %s cannot be run (set --cuda-checkpoint to the tool's path): %w: %w", path, ErrUnsupported, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("cuda-checkpoint at %s: --help: %w", path, err)
	case err != nil:
		if why := unusable(help, exitStatus(err)); why != "" {
			return nil, fmt.Errorf("cuda-checkpoint at %s: %s: %w", path, why, ErrUnsupported)
		}
		return nil, fmt.Errorf("cuda-checkpoint at %s: --help failed: %w: %w", path, ErrUnsupported, err)
	}
	// --action came with driver 555: CRIU's cuda plugin (plugins/cuda/
	// cuda_plugin.c, cuda_plugin_init) probes --help for it and asks for
	// "an r555 or higher version driver"; driver 550's tool had only
	// --toggle (NVIDIA/cuda-checkpoint's first README).
	if !strings.Contains(help, "--action") {
		return nil, fmt.Errorf("cuda-checkpoint at %s has no --action (driver 555 or newer needed): %w", path, ErrUnsupported)
	}
	v := helpVersion(help)
	c.caps = Caps{
		Kind:       "cli",
		Version:    v,
		DeviceMap:  strings.Contains(help, "--device-map"),
		RestoreTID: strings.Contains(help, "--get-restore-tid"),
		Warning:    driverWarning(v),
	}
	return c, nil
}

// toolEnv is the tool's environment: execx's minimal one and the daemon's
// LD_LIBRARY_PATH.
func toolEnv() []string {
	env := slices.Clone(execx.MinimalEnv)
	if v := os.Getenv("LD_LIBRARY_PATH"); v != "" {
		env = append(env, "LD_LIBRARY_PATH="+v)
	}
	return env
}

// resolve makes the tool's path absolute, looking a bare name up on PATH.
func resolve(path string) (string, error) {
	if path == "" || !strings.Contains(path, "/") {
		name := path
		if name == "" {
			name = "cuda-checkpoint"
		}
		p, err := execx.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%s not found on PATH (install the NVIDIA driver's cuda-checkpoint or set --cuda-checkpoint to its path): %w: %w", name, ErrUnsupported, err)
		}
		path = p
	}
	return filepath.Abs(path)
}

var versionRE = regexp.MustCompile(`(?i)\bversion\s+v?([0-9]+(?:\.[0-9]+)*)`)

// helpVersion returns the version the help text states, if any.
func helpVersion(help string) string {
	if m := versionRE.FindStringSubmatch(help); m != nil {
		return m[1]
	}
	return ""
}

// Path returns the tool's absolute path.
func (c *CLI) Path() string { return c.path }

// Caps returns what the tool supports.
func (c *CLI) Caps() Caps { return c.caps }

// State runs --get-state.
func (c *CLI) State(ctx context.Context, pid int) (State, error) {
	out, err := c.run(ctx, "get-state", pid, "--get-state", "--pid", strconv.Itoa(pid))
	if err != nil {
		return "", err
	}
	switch s := State(strings.TrimSpace(out)); s {
	case StateRunning, StateLocked, StateCheckpointed, StateFailed:
		return s, nil
	}
	return "", &OpError{Op: "get-state", PID: pid, Err: ErrFailed, Detail: fmt.Sprintf("unexpected output %q", out)}
}

// Lock runs --action lock with --timeout. Without a deadline on ctx the
// call may take timeout plus a grace.
func (c *CLI) Lock(ctx context.Context, pid int, timeout time.Duration) error {
	args := []string{"--action", "lock", "--pid", strconv.Itoa(pid)}
	if timeout > 0 {
		ms := max(1, (timeout+time.Millisecond-1)/time.Millisecond)
		args = append(args, "--timeout", strconv.FormatInt(int64(ms), 10))
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout+lockGrace)
			defer cancel()
		}
	}
	_, err := c.run(ctx, "lock", pid, args...)
	return err
}

// Checkpoint runs --action checkpoint.
func (c *CLI) Checkpoint(ctx context.Context, pid int) error {
	_, err := c.run(ctx, "checkpoint", pid, "--action", "checkpoint", "--pid", strconv.Itoa(pid))
	return err
}

// Restore runs --action restore, with --device-map when pairs are given;
// a tool without --device-map fails with ErrUnsupported without running.
func (c *CLI) Restore(ctx context.Context, pid int, pairs []GPUPair) error {
	args := []string{"--action", "restore", "--pid", strconv.Itoa(pid)}
	if len(pairs) > 0 {
		if !c.caps.DeviceMap {
			return &OpError{Op: "restore", PID: pid, Err: ErrUnsupported,
				Detail: fmt.Sprintf("cuda-checkpoint at %s has no --device-map (driver 580 or newer is needed to restore onto other GPUs)", c.path)}
		}
		m := make([]string, len(pairs))
		for i, p := range pairs {
			if p.Old == "" || p.New == "" || strings.ContainsAny(p.Old+p.New, ",=") {
				return &OpError{Op: "restore", PID: pid, Err: ErrFailed, Detail: fmt.Sprintf("bad GPU pair %q=%q", p.Old, p.New)}
			}
			m[i] = p.Old + "=" + p.New
		}
		args = append(args, "--device-map", strings.Join(m, ","))
	}
	_, err := c.run(ctx, "restore", pid, args...)
	return err
}

// Unlock runs --action unlock.
func (c *CLI) Unlock(ctx context.Context, pid int) error {
	_, err := c.run(ctx, "unlock", pid, "--action", "unlock", "--pid", strconv.Itoa(pid))
	return err
}

// RestoreThreadID runs --get-restore-tid.
func (c *CLI) RestoreThreadID(ctx context.Context, pid int) (int, error) {
	if !c.caps.RestoreTID {
		return 0, &OpError{Op: "get-restore-tid", PID: pid, Err: ErrUnsupported,
			Detail: fmt.Sprintf("cuda-checkpoint at %s has no --get-restore-tid", c.path)}
	}
	out, err := c.run(ctx, "get-restore-tid", pid, "--get-restore-tid", "--pid", strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	tid, perr := strconv.Atoi(strings.TrimSpace(out))
	if perr != nil || tid <= 0 {
		return 0, &OpError{Op: "get-restore-tid", PID: pid, Err: ErrFailed, Detail: fmt.Sprintf("unexpected output %q", out)}
	}
	return tid, nil
}

// Close releases nothing: each call is its own process.
func (c *CLI) Close() error { return nil }

// run runs the tool and turns a failure into an *OpError.
func (c *CLI) run(ctx context.Context, op string, pid int, args ...string) (string, error) {
	res, err := execx.Run(ctx, execx.Cmd{Path: c.path, Args: args, Env: c.env})
	if err == nil {
		return string(res.Stdout), nil
	}
	msg := strings.TrimSpace(string(res.Stderr))
	if msg == "" {
		msg = strings.TrimSpace(string(res.Stdout))
	}
	msg = strings.ReplaceAll(msg, "\n", "; ")
	e := &OpError{Op: op, PID: pid, Err: ErrFailed, Detail: msg}
	var exitErr *execx.ExitError
	switch {
	case ctx.Err() != nil:
		e.Err = ctxClass(ctx.Err())
		e.Detail = fmt.Sprintf("cuda-checkpoint killed after %v: %v", res.Duration.Round(time.Millisecond), ctx.Err())
		if msg != "" {
			e.Detail += ": " + msg
		}
	case errors.Is(err, execx.ErrNotFound):
		e.Err, e.Detail = ErrUnsupported, err.Error()
	case !errors.As(err, &exitErr):
		e.Detail = err.Error()
	default:
		var what string
		e.Err, what = toolFailure(op, string(res.Stderr)+"\n"+string(res.Stdout), exitErr.Status, slices.Contains(args, "--device-map"))
		e.Detail = fmt.Sprintf("%s (%s)", msg, what)
	}
	return "", e
}

// toolFailure classifies a run of the tool that exited with status, from its
// output, and says what it read there: the CUresult and the status, or why
// the tool could not run.
func toolFailure(op, output string, status int, pairs bool) (class error, what string) {
	if why := unusable(output, status); why != "" {
		return ErrUnsupported, why
	}
	what = fmt.Sprintf("exit status %d", status)
	if r, ok := toolResult(output, status); ok {
		return resultClass(op, r, pairs), resultName(r) + ", " + what
	}
	return ErrFailed, what
}

// exitStatus is the exit status of a failed run, -1 when it has none.
func exitStatus(err error) int {
	var exitErr *execx.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.Status
	}
	return -1
}

// unusable says why the tool could not run at all, from its output and exit
// status, or "". The stub's dynamic loader fails with status 127 when it
// finds no libcuda.so.1 (what NVIDIA's binary prints on a machine without
// the driver); the stub prints "Insufficient driver" and exits 255 when
// cuDriverGetVersion fails or is below 12040, CUDA 12.4 (its main compares
// the version with 0x2f07).
func unusable(output string, status int) string {
	switch {
	case status == 127 && strings.Contains(output, "error while loading shared libraries"):
		return "it cannot load the NVIDIA driver library libcuda.so.1 (set LD_LIBRARY_PATH in gpuschedd's environment to the library's directory)"
	case strings.Contains(output, "Insufficient driver"):
		return "the NVIDIA driver is too old for it (driver 550, CUDA 12.4, or newer needed)"
	}
	return ""
}
