package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
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
	caps Caps
}

var _ Driver = (*CLI)(nil)

// NewCLI finds cuda-checkpoint and probes its features. A missing tool, or
// one without --action (before driver 570), gives ErrUnsupported.
func NewCLI(ctx context.Context, opts CLIOptions) (*CLI, error) {
	path, err := resolve(opts.Path)
	if err != nil {
		return nil, err
	}
	res, err := execx.Run(ctx, execx.Cmd{Path: path, Args: []string{"--help"}})
	switch {
	case errors.Is(err, execx.ErrNotFound):
		return nil, fmt.Errorf("cuda-checkpoint at %s cannot be run (set --cuda-checkpoint to the tool's path): %w: %w", path, ErrUnsupported, err)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("cuda-checkpoint at %s: --help: %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("cuda-checkpoint at %s: --help failed: %w: %w", path, ErrUnsupported, err)
	}
	help := string(res.Stdout) + string(res.Stderr)
	if !strings.Contains(help, "--action") {
		return nil, fmt.Errorf("cuda-checkpoint at %s has no --action (driver 570 or newer needed): %w", path, ErrUnsupported)
	}
	return &CLI{path: path, caps: Caps{
		Kind:       "cli",
		Version:    helpVersion(help),
		DeviceMap:  strings.Contains(help, "--device-map"),
		RestoreTID: strings.Contains(help, "--get-restore-tid"),
	}}, nil
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
				Detail: fmt.Sprintf("cuda-checkpoint at %s has no --device-map (a newer driver is needed to restore onto other GPUs)", c.path)}
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
	res, err := execx.Run(ctx, execx.Cmd{Path: c.path, Args: args})
	if err == nil {
		return string(res.Stdout), nil
	}
	tail := strings.TrimSpace(string(res.Stderr))
	e := &OpError{Op: op, PID: pid, Err: classify(tail), Detail: strconv.Quote(tail)}
	var exitErr *execx.ExitError
	switch {
	case ctx.Err() != nil:
		e.Err = ctxClass(ctx.Err())
		e.Detail = fmt.Sprintf("cuda-checkpoint killed after %v: %v", res.Duration.Round(time.Millisecond), ctx.Err())
		if tail != "" {
			e.Detail += ": " + strconv.Quote(tail)
		}
	case errors.Is(err, execx.ErrNotFound):
		e.Err, e.Detail = ErrUnsupported, err.Error()
	case !errors.As(err, &exitErr):
		e.Err, e.Detail = ErrFailed, err.Error()
	}
	return "", e
}

var cudaErrorRE = regexp.MustCompile(`CUDA_ERROR_[A-Z_]+`)

// classify maps the CUDA error name in cuda-checkpoint's stderr to a class.
func classify(stderr string) error {
	switch cudaErrorRE.FindString(stderr) {
	case "CUDA_ERROR_OUT_OF_MEMORY":
		return ErrOutOfMemory
	case "CUDA_ERROR_TIMEOUT":
		return ErrTimeout
	case "CUDA_ERROR_ILLEGAL_STATE":
		return ErrIllegalState
	case "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_NOT_INITIALIZED", "CUDA_ERROR_NO_DEVICE":
		return ErrNotCUDA
	case "CUDA_ERROR_NOT_SUPPORTED":
		return ErrNotCheckpointable
	}
	return ErrFailed
}
