package checkpoint

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/procfs"
)

// PageServerArgv0 is the argv[0] under which the gpuschedd binary runs as
// one dump's page server (StartPageServerProcess): its request is one JSON
// line on stdin, CRIU's connection its fd 3, and it answers on stdout with
// one line once it serves and one with the transfer's outcome.
const PageServerArgv0 = "gpusched-pageserver"

// pageServerComm names its threads (/proc/PID/comm, at most 15 bytes):
// started from gpuschedd it would otherwise show as a second daemon.
const pageServerComm = "gpusched-pages"

// IsPageServer reports whether this process was started as a page server.
func IsPageServer() bool { return len(os.Args) > 0 && filepath.Base(os.Args[0]) == PageServerArgv0 }

// pageServerRequest is what a page server process serves.
type pageServerRequest struct {
	Dir    string `json:"dir"`
	Parent string `json:"parent,omitempty"`
	Limit  uint64 `json:"limit,omitempty"`
}

// pageServerReport is one line of a page server process: Ready once it
// serves, then the transfer's outcome.
type pageServerReport struct {
	Ready   bool      `json:"ready,omitempty"`
	Stats   PageStats `json:"stats"`
	Error   string    `json:"error,omitempty"`
	NoSpace bool      `json:"no_space,omitempty"` // Error is an ErrNoSpace
}

// maxPageServerLine bounds a request or report line.
const maxPageServerLine = 64 << 10

// PageServerMain is a page server process: it serves the request on stdin
// over fd 3 and reports on stdout; its exit status is 0 when the transfer
// was complete.
func PageServerMain() int {
	procfs.NameThreads(pageServerComm)
	out := json.NewEncoder(os.Stdout)
	report := func(r pageServerReport) int {
		if out.Encode(r) != nil || r.Error != "" {
			return 1
		}
		return 0
	}
	failed := func(err error) int {
		return report(pageServerReport{Error: err.Error(), NoSpace: errors.Is(err, ErrNoSpace)})
	}
	var req pageServerRequest
	if err := json.NewDecoder(io.LimitReader(os.Stdin, maxPageServerLine)).Decode(&req); err != nil {
		return failed(fmt.Errorf("page server request: %w", err))
	}
	p, err := newPageServer(req.Dir, req.Parent)
	if err != nil {
		return failed(err)
	}
	p.limit.Store(req.Limit)
	if p.conn, err = net.FileConn(os.NewFile(3, "page-server")); err != nil {
		return failed(fmt.Errorf("page server for %s: fd 3: %w", req.Dir, err))
	}
	if report(pageServerReport{Ready: true}) != 0 {
		return 1
	}
	p.serve()
	r := pageServerReport{Stats: p.stats}
	if p.err != nil {
		r.Error, r.NoSpace = p.err.Error(), errors.Is(p.err, ErrNoSpace)
	}
	return report(r)
}

// PageServerOptions configures StartPageServerProcess.
type PageServerOptions struct {
	Path   string // the gpuschedd binary
	Dir    string // the images directory
	Parent string // the previous dump's images directory, where unchanged pages stay; "" for none
	Limit  uint64 // bytes the server may write, past which the transfer fails with ErrNoSpace; 0: none
	// Cgroups are cgroup directories (one per hierarchy) the server is
	// moved into before it has its request: those of the dump's CRIU
	// worker (DumpOpts.Cgroups). None: it stays in its starter's.
	Cgroups []string
	CPUs    string // as DumpOpts.CPUs
}

// PageServerProcess is a pageServer run as a process of its own, so that
// what it spends on a dump (hashing, writing, the page cache it fills) is
// charged to the cgroups of the dump's CRIU worker, the user's, and not to
// the daemon's. It runs as its starter (root: it writes into the snapshot
// directory), in a process group of its own; a user whose cgroup holds it
// may freeze or kill it, which fails only that user's dump.
type PageServerProcess struct {
	serving
	cmd    *exec.Cmd
	stderr *tailBuffer
	ready  chan struct{} // closed at the ready line
}

// StartPageServerProcess starts a page server process for one CRIU dump
// into o.Dir, moves it into o.Cgroups and returns once it serves; ctx
// bounds the start alone. CRIU's end of the connection is TakeCRIUEnd's.
func StartPageServerProcess(ctx context.Context, o PageServerOptions) (*PageServerProcess, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("page server for %s: %w", o.Dir, err)
	}
	theirs := os.NewFile(uintptr(fds[0]), "page-server")
	defer theirs.Close()
	p := &PageServerProcess{
		serving: serving{dir: o.Dir, done: make(chan struct{}), criuEnd: os.NewFile(uintptr(fds[1]), "page-server-criu")},
		stderr:  newTailBuffer(stderrTail),
		ready:   make(chan struct{}),
	}
	p.stop = p.kill
	p.cmd = &exec.Cmd{
		Path:        o.Path,
		Args:        []string{PageServerArgv0},
		Env:         []string{},
		Stderr:      p.stderr,
		ExtraFiles:  []*os.File{theirs},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
		WaitDelay:   time.Second,
	}
	stdinR, stdin, err := os.Pipe()
	if err != nil {
		p.criuEnd.Close()
		return nil, fmt.Errorf("start page server for %s: %w", o.Dir, err)
	}
	p.cmd.Stdin = stdinR
	stdout, err := p.cmd.StdoutPipe() // closed by Start when it fails
	if err == nil {
		err = cpuaffinity.StartOn(o.CPUs, p.cmd.Start)
	}
	stdinR.Close()
	if err != nil {
		stdin.Close()
		p.criuEnd.Close()
		return nil, fmt.Errorf("start page server for %s: %w", o.Dir, err)
	}
	go p.follow(stdout)
	fail := func(err error) (*PageServerProcess, error) {
		p.Close()
		return nil, fmt.Errorf("page server for %s: %w", o.Dir, err)
	}
	if err := cgroup.Move(p.cmd.Process.Pid, o.Cgroups...); err != nil {
		stdin.Close()
		return fail(err)
	}
	req, _ := json.Marshal(pageServerRequest{Dir: o.Dir, Parent: o.Parent, Limit: o.Limit})
	_, _ = stdin.Write(append(req, '\n')) // a server that died says why at done
	stdin.Close()
	select {
	case <-p.ready:
		return p, nil
	case <-p.done:
		p.Close()
		if p.err == nil { // a transfer with no connection to serve
			return nil, fmt.Errorf("page server for %s: exited before it served", o.Dir)
		}
		return nil, p.err
	case <-ctx.Done():
		return fail(context.Cause(ctx))
	}
}

// follow reads the server's reports until it exits, then waits for it and
// sets the outcome.
func (p *PageServerProcess) follow(stdout io.Reader) {
	defer close(p.done)
	var outcome *pageServerReport
	ready := false
	lines := bufio.NewScanner(stdout)
	lines.Buffer(make([]byte, 0, 512), maxPageServerLine)
	for lines.Scan() {
		var r pageServerReport
		if err := json.Unmarshal(lines.Bytes(), &r); err != nil {
			break
		}
		if r.Ready {
			if !ready {
				close(p.ready)
				ready = true
			}
			continue
		}
		outcome = &r
	}
	if lines.Err() != nil || outcome == nil {
		p.kill()
	}
	werr := p.cmd.Wait()
	if outcome != nil {
		p.stats = outcome.Stats
	}
	switch {
	case outcome != nil && outcome.Error == "":
		return
	case outcome != nil:
		e := &reportedError{msg: outcome.Error}
		if outcome.NoSpace {
			e.class = ErrNoSpace
		}
		p.err = e
	default:
		p.err = fmt.Errorf("page server for %s: ended with no outcome (%v): %s", p.dir, werr, p.stderr)
	}
	if p.stopped() {
		p.err = fmt.Errorf("%w (%w)", errServerClosed, p.err)
	}
}

// reportedError is an error a page server process reported, with its
// class where it has one.
type reportedError struct {
	msg   string
	class error
}

func (e *reportedError) Error() string { return e.msg }
func (e *reportedError) Unwrap() error { return e.class }

func (p *PageServerProcess) kill() { _ = unix.Kill(-p.cmd.Process.Pid, unix.SIGKILL) }
