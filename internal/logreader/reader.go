package logreader

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/logfile"
)

// MaxReply bounds what is read of a reader's reply: more than any reply
// holds (logfile.MaxTail bytes of lines, each byte escaped to at most six,
// three more per line, the name and the rest).
const MaxReply = 6*logfile.MaxTail + 3*logfile.MaxTailLines + 1<<20

// maxStderr bounds what is kept of a reader's stderr.
const maxStderr = 4 << 10

// Reader starts log readers from Exe.
type Reader struct {
	Exe string // started as Argv0: gpusched-init, or the daemon's own binary
	// started, when set, is called with each reader's pid once it is
	// placed, before it has its request; tests look at it then.
	started func(pid int)
}

// ErrFrozen is Read's answer for a caller whose unified cgroup is frozen
// (cgroup.freeze, which a user may write in a cgroup they made): a reader
// there would not run.
var ErrFrozen = errors.New("the caller's cgroup is frozen")

// ErrNotApart is Read's answer for a caller in this process's own cgroups,
// where a reader would be charged as this process is.
var ErrNotApart = errors.New("the caller's CPU cgroups are the daemon's")

// Read has a reader placed in caller's cgroups, and on its CPUs cpus
// (cpuaffinity.Place; "": every CPU the daemon gives users), answer req,
// and returns the encoded reply (logreply.Encode's bytes). The reader is killed when ctx
// ends first. A caller apart from this process (the daemon, which may
// have moved itself since it started) in no hierarchy gets ErrNotApart,
// and nothing is started.
func (r Reader) Read(ctx context.Context, caller Cgroups, cpus string, req Request) ([]byte, error) {
	self, err := apartFromSelf(caller)
	if err != nil {
		return nil, err
	}
	in, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if caller.Unified != "" && caller.Unified != self.Unified && cgroup.Frozen(caller.Unified) {
		return nil, fmt.Errorf("%w: %s", ErrFrozen, caller.Unified)
	}
	cmd := exec.CommandContext(ctx, r.Exe)
	cmd.Args, cmd.Env, cmd.Dir = []string{Argv0}, []string{}, "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: maxStderr}
	if err := cpuaffinity.StartOn(cpus, cmd.Start); err != nil {
		return nil, fmt.Errorf("start log reader: %w", err)
	}
	reply, err := func() ([]byte, error) {
		defer stdin.Close()
		if err := place(cmd.Process.Pid, caller, self); err != nil {
			return nil, err
		}
		if r.started != nil {
			r.started(cmd.Process.Pid)
		}
		if _, err := stdin.Write(in); err != nil {
			return nil, fmt.Errorf("log reader's request: %w", err)
		}
		stdin.Close()
		reply, err := io.ReadAll(io.LimitReader(stdout, MaxReply+1))
		if err != nil {
			return nil, fmt.Errorf("log reader's reply: %w", err)
		}
		if len(reply) > MaxReply {
			return nil, fmt.Errorf("log reader's reply over %d bytes", MaxReply)
		}
		return reply, nil
	}()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("log reader: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	return reply, nil
}

// Apart is nil where caller is apart from this process (the daemon, which
// may have moved itself since it started) in some hierarchy, else
// ErrNotApart or why this process's own cgroups are unknown: a reader
// would be started for caller.
func Apart(caller Cgroups) error {
	_, err := apartFromSelf(caller)
	return err
}

// apartFromSelf is Apart, returning this process's cgroups.
func apartFromSelf(caller Cgroups) (Cgroups, error) {
	self, err := Of(os.Getpid())
	if err != nil {
		return Cgroups{}, fmt.Errorf("the daemon's own cgroups: %w", err)
	}
	if !caller.Apart(self) {
		return Cgroups{}, ErrNotApart
	}
	return self, nil
}

// place moves pid into caller's cgroups where they are not self's
// (cgroup.Move, which says why it is not started there): the reader
// waits for its request meanwhile, having done nothing but start. Moved
// into a frozen cgroup, the reader is frozen, and killed when the call
// ends.
func place(pid int, caller, self Cgroups) error {
	if err := cgroup.Move(pid, caller.Except(self)...); err != nil {
		return fmt.Errorf("place log reader: %w", err)
	}
	return nil
}

// limitedWriter keeps the first n bytes written to it and drops the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if keep := min(len(p), l.n); keep > 0 {
		l.w.Write(p[:keep])
		l.n -= keep
	}
	return len(p), nil
}
