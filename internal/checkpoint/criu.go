package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/execx"
)

// minCRIU is the oldest CRIU that dumps and restores on current kernels
// (3.x fails on the vDSO of the kernels this runs on).
const minCRIU = 40000

// Log files CRIU writes into an images directory.
const (
	DumpLog    = "dump.log"
	RestoreLog = "restore.log"
)

// CRIU drives CRIU in swrk mode with go-criu's RPC messages: one worker
// process per operation (see swrk), each under a deadline that kills the
// worker when it passes.
type CRIU struct {
	path       string
	version    string
	cudaPlugin bool
	lazy       bool
	stream     bool
	// ownersKdat is the kdat cache directory of the workers run as an
	// owner (OwnersKdat), or "" with kdatWhy saying why there is none.
	ownersKdat, kdatWhy string
}

// CRIUOptions configures NewCRIU.
type CRIUOptions struct {
	Path string // the criu binary or wrapper; "" = criu on PATH
	// Lazy asks for lazy restores (RestoreOpts.Lazy) where CRIU and the
	// kernel can do them; see Lazy.
	Lazy bool
	// Stream asks for restores whose pages come from our page source even
	// when the thaw is not lazy; see Streams.
	Stream bool
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
	var v *rpc.CriuVersion
	err := c.do(ctx, worker{}, nil, func(w *swrk) error {
		resp, err := w.call(&rpc.CriuReq{Type: rpc.CriuReqType_VERSION.Enum()}, nil)
		v = resp.GetVersion()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("criu %s: version: %w", path, err)
	}
	n := int(v.GetMajorNumber()*10000 + v.GetMinorNumber()*100 + v.GetSublevel())
	c.version = fmt.Sprintf("%d.%d.%d", n/10000, n/100%100, n%100)
	if n < minCRIU {
		return nil, fmt.Errorf("criu %s is version %s: %w: gpusched needs CRIU 4.0 or newer (scripts/install-criu.sh installs one)", path, c.version, ErrUnsupported)
	}
	c.cudaPlugin = cudaPluginInstalled()
	if err := kdatDir(OwnersKdat); err != nil {
		c.kdatWhy = err.Error()
	} else {
		c.ownersKdat = OwnersKdat
	}
	if o.Lazy || o.Stream {
		uffd := c.probeLazy(ctx) == nil
		c.lazy, c.stream = o.Lazy && uffd, o.Stream && uffd
	}
	return c, nil
}

// Lazy reports whether restores from disk should be lazy: asked for, and
// possible here.
func (c *CRIU) Lazy() bool { return c.lazy }

// Streams reports whether a restore from disk that is not lazy should
// still take its pages from our page source (a restore with
// RestoreOpts.Lazy whose tree runs only once every page is in): asked for,
// and possible here.
func (c *CRIU) Streams() bool { return c.stream }

// OwnersKdat is the directory where the workers run as a tree's owner
// keep CRIU's kernel probe, or "" and why there is none.
func (c *CRIU) OwnersKdat() (dir, why string) { return c.ownersKdat, c.kdatWhy }

// Version is CRIU's version, e.g. "4.1.1".
func (c *CRIU) Version() string { return c.version }

// Path is the binary CRIU runs as.
func (c *CRIU) Path() string { return c.path }

// CUDAPlugin reports whether CRIU's CUDA plugin is installed where CRIU
// would load it from; CRIU runs without it all the same (see noPlugins).
func (c *CRIU) CUDAPlugin() bool { return c.cudaPlugin }

// DumpOpts is one dump of a process tree into Dir.
type DumpOpts struct {
	Dir   string // images directory (exists, 0700)
	PID   int    // root of the tree: the PID namespace's init
	Leave Leave  // what becomes of the tree once it is dumped
	// As, when set, is the tree's owner, whom the worker runs as (see
	// Owner); nil runs it as this process (root).
	As *Owner
	// PageServer, when set, is CRIU's end of a page server's socket
	// (PageServerProcess.TakeCRIUEnd): the memory pages go there instead of Dir.
	// Dump closes it.
	PageServer *os.File
	// Cgroups, when set, are cgroup directories (one per hierarchy) the
	// worker is moved into once started, before it has its request
	// (cgroup.Move), so that its CPU, memory and tasks count there.
	Cgroups []string
	// CPUs are the tree's own (cpuaffinity.Caller's list), where the
	// worker runs: "" for every CPU the daemon gives users.
	CPUs string
	// Dumped, when set, is called at CRIU's post-dump notification, the
	// images written and the tree still seized (criu/cr-dump.c,
	// cr_dump_finish runs the script before it lets the tree go): what
	// the tree holds then is what the images hold, whoever sent it
	// SIGCONT before CRIU seized it. An error fails the dump.
	Dumped func() error
}

// Leave is what a dump does with the tree it imaged.
type Leave int

const (
	// LeaveDead, CRIU's default: it kills the tree and waits until every
	// process has died, address space torn down (pstree_wait in
	// criu/seize.c), before it answers.
	LeaveDead Leave = iota
	// LeaveStopped detaches from the tree and leaves it stopped
	// (TASK_STOPPED, --leave-stopped): the caller ends it, and need not
	// wait for its death.
	LeaveStopped
	// LeaveRunning leaves the tree as it was (fork).
	LeaveRunning
)

// RestoreOpts is one restore of the tree imaged in Dir.
type RestoreOpts struct {
	Dir string
	// Restored, when set, is called with the host pid of the restored
	// root once CRIU has recreated the tree, before it lets the tree run
	// (CRIU's post-restore notification, which comes before any plugin's
	// device hooks); an error fails the restore.
	Restored func(pid int) error
	// Lazy leaves the memory of the tree's private anonymous mappings to
	// a lazy-pages server listening in Dir (internal/lazypages): the tree
	// may run at once, and its pages come in as it touches them and in
	// the background. The caller waits for the server (every page in)
	// or, when it fails, must kill the tree.
	Lazy bool
	// MountsLeftOut, when set, is told the mountpoints the restore leaves
	// out because they are gone from the host (leaveOutVanishedMounts).
	MountsLeftOut func(mountpoints []string)
	// Cgroups, as DumpOpts.Cgroups: the worker runs there, and the tree
	// it restores is born there (CRIU leaves cgroups alone, commonRPC).
	Cgroups []string
	// CPUs, as DumpOpts.CPUs: the tree CRIU restores runs where its
	// worker does (CRIU restores no affinity).
	CPUs string
	// OOMScoreAdj is the worker's oom_score_adj, so the tree's where its
	// image holds 0: CRIU writes only another value (criu/cr-restore.c,
	// "if (tc->has_oom_score_adj && tc->oom_score_adj != 0)"), and the
	// restored processes would otherwise keep this process's.
	OOMScoreAdj int
}

// Dump images the tree rooted at o.PID into o.Dir.
func (c *CRIU) Dump(ctx context.Context, o DumpOpts) error {
	var extra []*os.File
	if o.PageServer != nil {
		defer o.PageServer.Close()
		extra = append(extra, o.PageServer)
	}
	var hookErr error
	err := withDir(o.Dir, func(fd int) error {
		return c.do(ctx, worker{as: o.As, cgroups: o.Cgroups, cpus: o.CPUs}, extra, func(w *swrk) error {
			_, err := w.call(&rpc.CriuReq{Type: rpc.CriuReqType_DUMP.Enum(), Opts: dumpRPC(o, fd)}, func(n *rpc.CriuNotify) error {
				if n.GetScript() != "post-dump" || o.Dumped == nil {
					return nil
				}
				hookErr = o.Dumped()
				return hookErr
			})
			return err
		})
	})
	if err == nil {
		err = sealImages(o.Dir)
	}
	switch {
	case hookErr != nil: // the caller's refusal, not CRIU's: its log says only that a script failed
		return fmt.Errorf("criu dump of pid %d: %w", o.PID, hookErr)
	case err != nil:
		return c.opError("dump", o.PID, o.Dir, DumpLog, err)
	}
	return nil
}

// Restore recreates the tree imaged in o.Dir as a child of this process and
// returns the host pid of its root, as CRIU's post-restore notification
// gives it. An image that names CRIU's CUDA plugin as needed is made
// restorable without it first (forgetCUDAPlugin), and one whose mounts
// are gone from the host without them (leaveOutVanishedMounts).
func (c *CRIU) Restore(ctx context.Context, o RestoreOpts) (int, error) {
	if err := unstageGhosts(o.Dir); err != nil { // a restore the daemon died in left it so
		return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: err}
	}
	if err := checkSums(o.Dir); err != nil {
		return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: err}
	}
	if err := forgetCUDAPlugin(o.Dir); err != nil {
		return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: err}
	}
	gone, err := leaveOutVanishedMounts(o.Dir)
	if err == nil {
		err = writeSums(o.Dir) // what the two changed
	}
	if err != nil {
		return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: err}
	}
	if len(gone) > 0 && o.MountsLeftOut != nil {
		o.MountsLeftOut(gone)
	}
	unstage, err := stageGhosts(o.Dir)
	if err != nil {
		return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: err}
	}
	defer unstage()
	pid := 0
	var hookErr error
	err = withDir(o.Dir, func(fd int) error {
		return c.do(ctx, worker{cgroups: o.Cgroups, cpus: o.CPUs, oomScoreAdj: &o.OOMScoreAdj}, nil, func(w *swrk) error {
			_, err := w.call(&rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: restoreRPC(fd, o.Lazy)}, func(n *rpc.CriuNotify) error {
				if n.GetScript() != "post-restore" {
					return nil
				}
				pid = int(n.GetPid())
				if o.Restored != nil {
					hookErr = o.Restored(pid)
				}
				return hookErr
			})
			return err
		})
	})
	if err == nil && pid <= 0 {
		err = errors.New("no post-restore notification")
	}
	if err != nil {
		if pid > 0 { // our child (RstSibling), which CRIU killed or leaves to us
			_ = unix.Kill(pid, unix.SIGKILL)
			_, _ = unix.Wait4(pid, nil, 0, nil)
		}
		if hookErr != nil {
			return 0, &CRIUError{Op: "restore", Dir: o.Dir, Err: ErrFailed, Cause: hookErr}
		}
		return 0, c.opError("restore", 0, o.Dir, RestoreLog, err)
	}
	return pid, nil
}

// dumpRPC maps DumpOpts to CRIU's options; with restoreRPC the only place
// CRIU options are chosen.
func dumpRPC(o DumpOpts, dirFd int) *rpc.CriuOpts {
	opts := commonRPC(dirFd, DumpLog)
	opts.Pid = ptr(int32(o.PID))
	switch o.Leave {
	case LeaveRunning:
		opts.LeaveRunning = ptr(true)
	case LeaveStopped:
		opts.LeaveStopped = ptr(true)
	}
	if o.PageServer != nil {
		// swrk mode takes an inherited, connected socket (criu/cr-service.c,
		// ps->fd): nothing listens where another user could connect first.
		opts.Ps = &rpc.CriuPageServerInfo{Fd: ptr(int32(swrkFirstExtraFD))}
	}
	if o.As != nil {
		opts.Unprivileged = ptr(true) // CRIU refuses a non-root euid without it
	}
	// The tree's mounts are the host's, copied by CLONE_NEWNS as slaves,
	// and its own /proc (internal/sandbox, ownProc): every mount but that
	// proc is dumped as external, to be bound from the host again on
	// restore (`--external mnt[]:sm`, resolve_external_mounts in
	// criu/mount.c); the proc is mounted anew for the restored PID
	// namespace.
	opts.AutoExtMnt, opts.ExtSharing, opts.ExtMasters = ptr(true), ptr(true), ptr(true)
	return opts
}

func restoreRPC(dirFd int, lazy bool) *rpc.CriuOpts {
	opts := commonRPC(dirFd, RestoreLog)
	// The restored root becomes this daemon's child, which reaps it.
	opts.RstSibling = ptr(true)
	if lazy {
		opts.LazyPages = ptr(true)
	}
	// The tree's mount namespace is rebuilt over the host's root, its
	// external mounts bound from the host (`--external mnt[] --root /`;
	// without a root, CRIU 4.2 hits BUG_ON(!mi->plain_mountpoint) in
	// service_mountpoint, criu/mount.c).
	opts.AutoExtMnt, opts.Root = ptr(true), ptr("/")
	return opts
}

// commonRPC are the options every operation shares. Managed trees are a
// session of their own with no terminal and no cgroup of their own, so
// CRIU needs no shell-job option and leaves cgroups alone.
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
		// Established TCP connections are not imaged: the tree comes back
		// with them closed, as after a network outage, its listening
		// sockets listening. CRIU otherwise refuses the dump ("Connected
		// TCP socket", criu/sk-inet.c can_dump_inet_sk), and any local
		// user who connected to a port the tree listens on, and stayed,
		// kept it from the disk. A restore of an image dumped so needs it
		// too (criu/image.c check_img_inventory: "Need to set the
		// --tcp-close options").
		TcpClose: ptr(true),
	}
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

// do runs fn against a fresh swrk worker (run as and where in says, with
// extra descriptors), killing the worker when ctx ends first: past its
// deadline an ErrTimeout, else ctx's cause.
func (c *CRIU) do(ctx context.Context, in worker, extra []*os.File, fn func(*swrk) error) error {
	if ctx.Err() != nil {
		return ended(ctx)
	}
	w, err := startSwrk(c.path, c.env(in.as), in, extra)
	if err != nil {
		return err
	}
	for _, f := range extra {
		f.Close() // the worker holds them now; a page server sees EOF once the worker is done
	}
	done := make(chan error, 1)
	go func() { done <- fn(w) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		w.kill()
		<-done
		err = ended(ctx)
	}
	if cerr := w.close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// ended is why ctx ended: past its deadline an ErrTimeout, else its cause.
func ended(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: criu did not finish in time (%v)", ErrTimeout, context.Cause(ctx))
	}
	return fmt.Errorf("criu stopped: %w", context.Cause(ctx))
}

// sealImages makes the files CRIU wrote into an images directory root's
// and private to root (CRIU writes them 0644, and as the tree's owner when
// it ran as that owner), and records their sums (writeSums); the
// directory itself is root's and 0700 already.
func sealImages(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("images %s: %w", dir, err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue // the parent link
		}
		p := filepath.Join(dir, e.Name())
		if err := os.Lchown(p, 0, 0); err != nil {
			return fmt.Errorf("images %s: %w", dir, err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return fmt.Errorf("images %s: %w", dir, err)
		}
	}
	return writeSums(dir)
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
	why := unimageableWhy(lines)
	if why != "" {
		class = ErrNotCheckpointable
	}
	return &CRIUError{Op: op, PID: pid, Dir: dir, Err: class, Why: why, Lines: lines, Cause: err}
}

// CRIUError is a failed CRIU dump or restore: its class (ErrFailed,
// ErrTimeout, ErrNoSpace or ErrNotCheckpointable), the Error lines of
// CRIU's log and what the worker answered.
type CRIUError struct {
	Op    string // "dump" or "restore"
	PID   int    // dumped tree's root; 0 for a restore
	Dir   string
	Err   error
	Why   string // for ErrNotCheckpointable: what the tree holds, in words, said instead of Lines
	Lines []string
	Cause error
}

func (e *CRIUError) Error() string {
	msg := "criu " + e.Op
	if e.PID > 0 {
		msg += fmt.Sprintf(" of pid %d", e.PID)
	}
	msg += fmt.Sprintf(": %v", e.Err)
	if e.Why != "" {
		return msg + ": " + e.Why
	}
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
