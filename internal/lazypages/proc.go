package lazypages

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/procfs"
)

// ServerArgv0 is the argv[0] under which the gpuschedd binary runs as the
// lazy-pages server: "gpusched-lazypages DIR [AHEAD]", with the listening
// socket as fd 3 and the read end of the starter's running pipe as fd 4;
// AHEAD is Options.ReadAhead ("read-ahead" or none).
const ServerArgv0 = "gpusched-lazypages"

// Comm names the server's threads (/proc/PID/comm, at most 15 bytes):
// started from gpuschedd it would otherwise show as a second daemon.
const Comm = "gpusched-lazypg"

// Files of a lazy restore in the images directory.
const (
	// SocketName is where CRIU's restore finds the lazy-pages side: a
	// Unix socket of this name in its work dir (LAZY_PAGES_SOCK_NAME in
	// criu/uffd.c; the swrk restore's work dir is its images dir).
	SocketName = "lazy-pages.socket"
	// LogName is the server's log (its stderr).
	LogName = "lazy-pages.log"
)

// IsServer reports whether this process was started as the server.
func IsServer() bool { return len(os.Args) > 0 && filepath.Base(os.Args[0]) == ServerArgv0 }

// Main runs the server and returns its exit status: 0 once every lazy
// page is in. It ignores termination signals: it must outlive the daemon.
func Main() int {
	procfs.NameThreads(Comm)
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	err := errors.New("usage: " + ServerArgv0 + " DIR [" + argReadAhead + "] (listening socket as fd 3, running pipe as fd 4)")
	if n := len(os.Args); n == 2 || n == 3 && os.Args[2] == argReadAhead {
		ahead := 0
		if n == 3 {
			ahead = readers
		}
		var ln net.Listener
		if ln, err = net.FileListener(os.NewFile(3, SocketName)); err == nil {
			if ul, ok := ln.(*net.UnixListener); ok {
				err = serve(os.Args[1], ul, os.NewFile(4, "running"), ahead)
			} else {
				err = errors.New("fd 3 is not a Unix socket")
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ServerArgv0, err)
		return 1
	}
	return 0
}

// Options configures Start.
type Options struct {
	Path string // the gpuschedd binary
	Dir  string // the images directory, the restore's work dir
	Env  []string
	// ReadAhead starts the transfer's reads as the server starts, all of
	// them in flight, instead of once the processes run (Running): for a
	// restore whose processes run only once every page is in, where no
	// fault waits behind the reads.
	ReadAhead bool
	// Cgroups are cgroup directories (one per hierarchy) the server is
	// moved into as it starts, before the restore connects: those of the
	// restore's CRIU worker, a user's. None: it stays in its starter's.
	Cgroups []string
	// CPUs are the restored tree's own (cpuaffinity.Caller's list), where
	// the server runs: "" for every CPU the daemon gives users.
	CPUs string
}

// argReadAhead is the server's argument for Options.ReadAhead.
const argReadAhead = "read-ahead"

// Server is a running lazy-pages server as its starter sees it.
type Server struct {
	cmd     *exec.Cmd
	dir     string
	running *os.File // the write end of the running pipe
	done    chan struct{}
	err     error // once done: nil when every page is in
	// Startup is how long Start took: the socket listens on return.
	Startup time.Duration
}

// Start listens on the socket in o.Dir and starts the server on it. The
// server has no parent-death signal: should the caller die mid-transfer,
// the server goes on until every page is in, or the restored processes
// would meet zeros where their pages were.
func Start(o Options) (*Server, error) {
	start := time.Now()
	ln, err := listen(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("lazy-pages socket: %w", err)
	}
	defer ln.Close()
	log, err := os.OpenFile(filepath.Join(o.Dir, LogName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		os.Remove(filepath.Join(o.Dir, SocketName))
		return nil, err
	}
	defer log.Close()
	runR, runW, err := os.Pipe()
	if err != nil {
		os.Remove(filepath.Join(o.Dir, SocketName))
		return nil, err
	}
	defer runR.Close()
	args := []string{ServerArgv0, o.Dir}
	if o.ReadAhead {
		args = append(args, argReadAhead)
	}
	cmd := &exec.Cmd{
		Path:        o.Path,
		Args:        args,
		Env:         append(os.Environ(), o.Env...),
		Stderr:      log,
		ExtraFiles:  []*os.File{ln, runR},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	if err := cpuaffinity.StartOn(o.CPUs, cmd.Start); err != nil {
		runW.Close()
		os.Remove(filepath.Join(o.Dir, SocketName))
		return nil, fmt.Errorf("start lazy-pages server: %w", err)
	}
	s := &Server{cmd: cmd, dir: o.Dir, running: runW, done: make(chan struct{})}
	go func() {
		if err := cmd.Wait(); err != nil {
			s.err = fmt.Errorf("lazy-pages server: %w: %s", err, logTail(filepath.Join(o.Dir, LogName)))
		}
		close(s.done)
	}()
	if err := cgroup.Move(cmd.Process.Pid, o.Cgroups...); err != nil {
		s.Close()
		return nil, fmt.Errorf("lazy-pages server: %w", err)
	}
	s.Startup = time.Since(start)
	return s, nil
}

// listen binds the socket in dir, through /proc/self/fd so that a long
// path fits sun_path, and returns it as a file to hand down.
func listen(dir string) (*os.File, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	path := filepath.Join(dir, SocketName)
	os.Remove(path) // a stale one from a killed restore
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), SocketName)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("/proc/self/fd/%d/%s", d.Fd(), SocketName)}); err != nil {
		f.Close()
		return nil, err
	}
	if err := unix.Listen(fd, 8); err != nil {
		f.Close()
		os.Remove(path)
		return nil, err
	}
	return f, nil
}

// logTail is the last lines of the server's log, for errors.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	b = bytes.TrimSpace(b)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	if len(b) == 0 {
		return "(no log)"
	}
	return string(b)
}

// Running tells the server that the restored processes run: it copies,
// and reads unless it reads ahead, only then (or when the starter dies),
// so that until they run their faults meet no copy, and no read in the
// disk's queue for a lazy restore; CRIU's restore still
// touches the processes after it said it finished (compel_stop_on_syscall,
// finalize_restore in criu/cr-restore.c), and a fault behind the
// transfer's reads held it up.
func (s *Server) Running() { s.running.Close() }

// Wait waits until every page is in (nil) or the server fails; when ctx
// ends first it kills the server and says so.
func (s *Server) Wait(ctx context.Context) error {
	select {
	case <-s.done:
		return s.err
	case <-ctx.Done():
		s.Kill()
		<-s.done
		return fmt.Errorf("lazy-pages server did not finish in time: %w", context.Cause(ctx))
	}
}

// Kill ends the server; the pages still out are lost to the restored
// processes.
func (s *Server) Kill() { _ = unix.Kill(-s.cmd.Process.Pid, unix.SIGKILL) }

// Close kills the server if it still runs, waits for it and removes its
// socket; its log stays.
func (s *Server) Close() error {
	s.running.Close()
	select {
	case <-s.done:
	default:
		s.Kill()
		<-s.done
	}
	err := os.Remove(filepath.Join(s.dir, SocketName))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}
