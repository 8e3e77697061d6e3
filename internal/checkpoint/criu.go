package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	criu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/execx"
	"github.com/gpusched/gpusched/internal/procfs"
)

// minCRIU is the oldest CRIU that dumps and restores on current kernels
// (3.x fails on the vDSO of the kernels this runs on).
const minCRIU = 40000

// Log files CRIU writes into an images directory.
const (
	DumpLog    = "dump.log"
	RestoreLog = "restore.log"
)

// CRIU drives CRIU in swrk mode through go-criu: one worker process per
// operation, each under a deadline that kills the worker when it passes.
type CRIU struct {
	path       string
	version    string
	cudaPlugin bool
	// spawn serializes worker starts, so the worker that appears among
	// this process's children is known to be the one just started.
	spawn sync.Mutex
}

// CRIUOptions configures NewCRIU.
type CRIUOptions struct {
	Path string // the criu binary or wrapper; "" = criu on PATH
}

// NewCRIU finds CRIU, asks it its version over swrk and checks it is new
// enough. A missing or old CRIU is ErrUnsupported.
func NewCRIU(ctx context.Context, o CRIUOptions) (*CRIU, error) {
	path := o.Path
	if path == "" {
		p, err := execx.LookPath("criu")
		if err != nil {
			return nil, fmt.Errorf("criu: %w: not found on PATH (run scripts/install-criu.sh, or give --criu)", ErrUnsupported)
		}
		path = p
	}
	if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return nil, fmt.Errorf("criu %s: %w: not an executable file", path, ErrUnsupported)
	}
	c := &CRIU{path: path}
	var n int
	err := c.do(ctx, func(w *criu.Criu) error {
		var err error
		n, err = w.GetCriuVersion()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("criu %s: version: %w", path, err)
	}
	c.version = fmt.Sprintf("%d.%d.%d", n/10000, n/100%100, n%100)
	if n < minCRIU {
		return nil, fmt.Errorf("criu %s is version %s: %w: gpusched needs CRIU 4.0 or newer (scripts/install-criu.sh installs one)", path, c.version, ErrUnsupported)
	}
	c.cudaPlugin = cudaPluginInstalled()
	return c, nil
}

// Version is CRIU's version, e.g. "4.1.1".
func (c *CRIU) Version() string { return c.version }

// Path is the binary CRIU runs as.
func (c *CRIU) Path() string { return c.path }

// CUDAPlugin reports whether CRIU's CUDA plugin is installed where CRIU
// loads plugins from.
func (c *CRIU) CUDAPlugin() bool { return c.cudaPlugin }

// DumpOpts is one dump of a process tree into Dir.
type DumpOpts struct {
	Dir          string // images directory (exists, 0700)
	PID          int    // root of the tree: the PID namespace's init
	LeaveRunning bool   // leave the tree as it was (fork); otherwise CRIU kills it once dumped
	// PageServer, when set (host:port), receives the memory pages
	// instead of Dir: a PageServer's Endpoint.
	PageServer *Endpoint
}

// Endpoint is a TCP address CRIU connects to.
type Endpoint struct {
	Address string
	Port    int32
}

// RestoreOpts is one restore of the tree imaged in Dir.
type RestoreOpts struct {
	Dir string
}

// Dump images the tree rooted at o.PID into o.Dir.
func (c *CRIU) Dump(ctx context.Context, o DumpOpts) error {
	err := withDir(o.Dir, func(fd int) error {
		return c.do(ctx, func(w *criu.Criu) error {
			return w.Dump(dumpRPC(o, fd), criu.NoNotify{})
		})
	})
	if err != nil {
		return c.opError("dump", o.PID, o.Dir, DumpLog, err)
	}
	return nil
}

// Restore recreates the tree imaged in o.Dir as a child of this process and
// returns the host pid of its root, as CRIU's post-restore notification
// gives it.
func (c *CRIU) Restore(ctx context.Context, o RestoreOpts) (int, error) {
	n := &restoreNotify{}
	err := withDir(o.Dir, func(fd int) error {
		return c.do(ctx, func(w *criu.Criu) error {
			return w.Restore(restoreRPC(fd), n)
		})
	})
	if err == nil && n.pid <= 0 {
		err = errors.New("no post-restore notification")
	}
	if err != nil {
		return 0, c.opError("restore", 0, o.Dir, RestoreLog, err)
	}
	return n.pid, nil
}

// dumpRPC maps DumpOpts to CRIU's options; with restoreRPC the only place
// CRIU options are chosen.
func dumpRPC(o DumpOpts, dirFd int) *rpc.CriuOpts {
	opts := commonRPC(dirFd, DumpLog)
	opts.Pid = ptr(int32(o.PID))
	opts.LeaveRunning = ptr(o.LeaveRunning)
	if o.PageServer != nil {
		opts.Ps = &rpc.CriuPageServerInfo{Address: ptr(o.PageServer.Address), Port: ptr(o.PageServer.Port)}
	}
	return opts
}

func restoreRPC(dirFd int) *rpc.CriuOpts {
	opts := commonRPC(dirFd, RestoreLog)
	// The restored root becomes this daemon's child, which reaps it.
	opts.RstSibling = ptr(true)
	return opts
}

// commonRPC are the options every operation shares. Managed trees are a
// session of their own with no terminal, no mount namespace and no
// cgroup of their own, so CRIU needs no shell-job or mount options and
// leaves cgroups alone.
func commonRPC(dirFd int, log string) *rpc.CriuOpts {
	return &rpc.CriuOpts{
		// The worker opens it as /proc/<our pid>/fd/<dirFd>.
		ImagesDirFd:       ptr(int32(dirFd)),
		LogFile:           ptr(log),
		LogLevel:          ptr(int32(2)),
		NotifyScripts:     ptr(true),
		ManageCgroupsMode: ptr(rpc.CriuCgMode_IGNORE),
		FileLocks:         ptr(true),
		// An init whose binary was replaced on disk (an upgrade) runs a
		// deleted file, which CRIU dumps as a ghost; the default 1 MiB
		// limit would refuse the daemon binary.
		GhostLimit: ptr(uint32(ghostLimit)),
	}
}

// cudaPluginInstalled reports whether CRIU would load its CUDA plugin:
// cuda_plugin.so in $CRIU_LIBS_DIR or CRIU's default plugin directory.
func cudaPluginInstalled() bool {
	for _, dir := range []string{os.Getenv("CRIU_LIBS_DIR"), "/usr/lib/criu", "/usr/lib64/criu", "/usr/local/lib/criu"} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "cuda_plugin.so")); err == nil {
			return true
		}
	}
	return false
}

// ghostLimit bounds one deleted-but-open file CRIU copies into an image.
const ghostLimit = 256 << 20

func ptr[T any](v T) *T { return &v }

// withDir runs fn with the images directory open; CRIU is given the fd, so
// the directory cannot be swapped under it by path.
func withDir(dir string, fn func(fd int) error) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("images directory: %w", err)
	}
	defer f.Close()
	return fn(int(f.Fd()))
}

// restoreNotify takes the restored root's pid from CRIU's notification.
type restoreNotify struct {
	criu.NoNotify
	pid int
}

func (n *restoreNotify) PostRestore(pid int32) error {
	n.pid = int(pid)
	return nil
}

// do runs fn against a fresh swrk worker, killing the worker when ctx ends
// first.
func (c *CRIU) do(ctx context.Context, fn func(*criu.Criu) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := criu.MakeCriu()
	w.SetCriuPath(c.path)
	c.spawn.Lock()
	before := swrkChildren()
	err := w.Prepare()
	var worker int
	for pid := range swrkChildren() {
		if !before[pid] {
			worker = pid
		}
	}
	c.spawn.Unlock()
	if err != nil {
		return fmt.Errorf("start criu swrk: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- fn(w) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		if worker > 0 {
			_ = unix.Kill(worker, unix.SIGKILL)
		}
		<-done
		err = fmt.Errorf("%w: criu did not finish in time (%v)", ErrTimeout, context.Cause(ctx))
	}
	if cerr := w.Cleanup(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// swrkChildren lists this process's children that are CRIU workers. The
// children of a process are listed per thread; the start of a child's
// command line tells a worker.
func swrkChildren() map[int]bool {
	out := map[int]bool{}
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, t := range tasks {
		b, err := procfs.ReadFile(filepath.Join("/proc/self/task", t.Name(), "children"), procfs.MaxPIDList)
		if errors.Is(err, procfs.ErrTruncated) {
			b = b[:bytes.LastIndexByte(b, ' ')+1] // whole pids only
		} else if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			cmd, _ := procfs.ReadFile("/proc/"+f+"/cmdline", procfs.MaxArgs) // a prefix will do
			if strings.Contains(string(cmd), "\x00swrk\x00") {
				out[pid] = true
			}
		}
	}
	return out
}

// opError wraps a failed CRIU operation with the Error lines of its log.
func (c *CRIU) opError(op string, pid int, dir, log string, err error) error {
	lines := LogErrors(filepath.Join(dir, log), 6)
	class := ErrFailed
	switch {
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		class = ErrTimeout
	case mentions(lines, "No space left on device") || mentions(lines, "Disk quota exceeded"):
		class = ErrNoSpace
	}
	return &CRIUError{Op: op, PID: pid, Dir: dir, Err: class, Lines: lines, Cause: err}
}

// CRIUError is a failed CRIU dump or restore: its class (ErrFailed,
// ErrTimeout or ErrNoSpace), the Error lines of CRIU's log and what the
// worker answered.
type CRIUError struct {
	Op    string // "dump" or "restore"
	PID   int    // dumped tree's root; 0 for a restore
	Dir   string
	Err   error
	Lines []string
	Cause error
}

func (e *CRIUError) Error() string {
	msg := "criu " + e.Op
	if e.PID > 0 {
		msg += fmt.Sprintf(" of pid %d", e.PID)
	}
	msg += fmt.Sprintf(": %v", e.Err)
	if len(e.Lines) > 0 {
		return msg + ": " + strings.Join(e.Lines, "; ")
	}
	return fmt.Sprintf("%s: %v", msg, e.Cause)
}

// Unwrap returns the class sentinel.
func (e *CRIUError) Unwrap() error { return e.Err }

func mentions(lines []string, s string) bool {
	for _, l := range lines {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
