package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/execx"
)

// Files of a lazy restore in the images directory.
const (
	LazyPagesLog = "lazy-pages.log"
	// lazySocket is where CRIU's restore finds the lazy-pages daemon: a
	// Unix socket of this name in the work dir of both (criu/uffd.c,
	// LAZY_PAGES_SOCK_NAME; the swrk restore's work dir is its images dir).
	lazySocket = "lazy-pages.socket"
)

// LazyPages is CRIU's lazy-pages daemon (`criu lazy-pages`, criu/uffd.c)
// serving the memory of one restore. The restore hands it each process's
// userfaultfd (ud_open); it copies faulted pages first and, once the
// restore says it finished (LAZY_PAGES_RESTORE_FINISHED), every other page
// in the background (handle_requests, xfer_pages), and exits 0 when all of
// them are in. Until then the images must stay: a page it cannot serve is
// lost to the process, and so is every page still out if it dies, since
// the kernel then fills later faults with zeros (userfaultfd_release).
type LazyPages struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{}
	err  error // once done: nil when every page is in
	// Startup is how long the daemon took to listen.
	Startup time.Duration
}

// probeLazy asks whether CRIU here can restore lazily: the kernel's
// userfaultfd with the non-cooperative events CRIU needs (`criu check
// --feature uffd-noncoop`, criu/cr-check.c).
func (c *CRIU) probeLazy(ctx context.Context) error {
	_, err := execx.Run(ctx, execx.Cmd{Path: c.path, Args: []string{"--libdir", noPlugins, "check", "--feature", "uffd-noncoop"}, Env: criuEnv()})
	if err != nil {
		return fmt.Errorf("criu check --feature uffd-noncoop: %w: %v", ErrUnsupported, err)
	}
	return nil
}

// startLazyPages starts CRIU's lazy-pages daemon on the images in dir and
// returns once it listens (CRIU writes a byte to --status-fd then,
// status_ready in criu/util.c).
func (c *CRIU) startLazyPages(ctx context.Context, dir string) (*LazyPages, error) {
	start := time.Now()
	os.Remove(filepath.Join(dir, lazySocket)) // a stale one from a killed restore
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(c.path, "--libdir", noPlugins, "lazy-pages",
		"--images-dir", dir, "--work-dir", dir, "--status-fd", "3",
		"--log-file", LazyPagesLog, "-v2")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Env = criuEnv()
	// No Pdeathsig: should this daemon die mid-transfer, the lazy-pages
	// daemon goes on until every page is in, or the restored processes
	// would meet zeros where their pages were.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("start criu lazy-pages: %w", err)
	}
	l := &LazyPages{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if err != nil {
			lines := LogErrors(filepath.Join(dir, LazyPagesLog), 6)
			l.err = &CRIUError{Op: "lazy-pages", Dir: dir, Err: ErrFailed, Lines: lines, Cause: err}
		}
		close(l.done)
	}()
	ready := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(r, b[:]) // EOF: it exited before listening
		ready <- err
	}()
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = context.Cause(ctx)
	}
	if err != nil {
		l.Kill()
		<-l.done
		if l.err != nil {
			return nil, l.err
		}
		return nil, fmt.Errorf("criu lazy-pages did not start: %w", err)
	}
	l.Startup = time.Since(start)
	return l, nil
}

// Wait waits until every page is in (nil) or the daemon fails; when ctx
// ends first it kills the daemon and says so.
func (l *LazyPages) Wait(ctx context.Context) error {
	select {
	case <-l.done:
		return l.err
	case <-ctx.Done():
		l.Kill()
		<-l.done
		return fmt.Errorf("%w: criu lazy-pages did not finish in time (%v)", ErrTimeout, context.Cause(ctx))
	}
}

// Kill ends the daemon (its process group); the pages still out are lost
// to the restored processes.
func (l *LazyPages) Kill() {
	_ = unix.Kill(-l.cmd.Process.Pid, unix.SIGKILL)
}

// Close kills the daemon if it still runs, waits for it and removes its
// socket; its log stays.
func (l *LazyPages) Close() error {
	select {
	case <-l.done:
	default:
		l.Kill()
		<-l.done
	}
	err := os.Remove(filepath.Join(l.dir, lazySocket))
	if errors.Is(err, os.ErrNotExist) {
		err = nil
	}
	return err
}
