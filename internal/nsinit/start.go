package nsinit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// ErrCommand means the init ran but could not start the command (not found,
// not executable); Start's error wraps it with the init's explanation.
var ErrCommand = errors.New("command did not start")

// Spec describes one managed process to start.
type Spec struct {
	InitPath string   // binary to re-execute as init (must understand Argv0)
	Argv     []string // the command
	Env      []string // its whole environment
	Dir      string   // its working directory
	UID, GID uint32
	Groups   []uint32
	Nice     int      // applied to every thread of the tree before the command runs
	Log      *os.File // stdout and stderr
	Status   *os.File // written by the init when the command ends
	// Recorded is called once the init exists and before the command runs;
	// the daemon persists the init's identity there. An error aborts the start.
	Recorded func(initPID int, initStart uint64) error
}

// Started identifies a running tree.
type Started struct {
	InitPID   int
	InitStart uint64
	PID       int // host pid of the command
	PIDStart  uint64
	Pidfd     int // of the init, nonblocking; owned by the caller
}

// Start spawns the init in a new PID namespace and session as the given
// user, runs the handshake and returns once the command runs. On any error
// nothing is left running: the init is killed and reaped.
func Start(ctx context.Context, s Spec) (*Started, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handshake socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "init-sync")
	theirs := os.NewFile(uintptr(fds[1]), "init-sync-child")
	defer ours.Close()

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		theirs.Close()
		return nil, err
	}
	proc, err := os.StartProcess(s.InitPath, append([]string{Argv0, "--"}, s.Argv...), &os.ProcAttr{
		Dir:   s.Dir,
		Env:   s.Env,
		Files: []*os.File{devnull, s.Log, s.Log, s.Status, theirs},
		Sys: &syscall.SysProcAttr{
			Setsid:     true,
			Cloneflags: syscall.CLONE_NEWPID,
			Credential: &syscall.Credential{Uid: s.UID, Gid: s.GID, Groups: s.Groups},
		},
	})
	devnull.Close()
	theirs.Close()
	if err != nil {
		return nil, fmt.Errorf("start init: %w", err)
	}
	pid := proc.Pid
	// Our unreaped child cannot be replaced by another process, so this
	// pidfd names it for sure.
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	_ = proc.Release()
	if err != nil {
		killAndReap(pid, -1)
		return nil, fmt.Errorf("pidfd of init %d: %w", pid, err)
	}
	st, err := start(ctx, s, ours, pid, pidfd)
	if err != nil {
		killAndReap(pid, pidfd)
		unix.Close(pidfd)
		return nil, err
	}
	return st, nil
}

func start(ctx context.Context, s Spec, sync *os.File, pid, pidfd int) (*Started, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = sync.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = sync.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r := bufio.NewReader(sync)

	if _, err := expect(r, msgReady); err != nil {
		return nil, err
	}
	initStart, err := procfs.StartTime(pid)
	if err != nil {
		return nil, fmt.Errorf("init %d: %w", pid, err)
	}
	if s.Nice != 0 {
		if err := SetNice(pid, s.Nice); err != nil {
			return nil, err
		}
	}
	if s.Recorded != nil {
		if err := s.Recorded(pid, initStart); err != nil {
			return nil, err
		}
	}
	if _, err := fmt.Fprintln(sync, msgGo); err != nil {
		return nil, fmt.Errorf("init %d handshake: %w", pid, err)
	}
	rest, err := expect(r, msgStarted)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(rest)
	if len(f) != 2 {
		return nil, fmt.Errorf("init %d: malformed start report %q", pid, rest)
	}
	hostPID, _ := strconv.Atoi(f[1])
	if hostPID <= 0 {
		if hostPID, err = FindCommand(pid); err != nil {
			return nil, err
		}
	}
	cmdStart, err := procfs.StartTime(hostPID)
	if err != nil {
		// The command may already have exited; the watcher reports that.
		cmdStart = 0
	}
	if s.Nice != 0 {
		_ = SetNice(hostPID, s.Nice)
	}
	return &Started{InitPID: pid, InitStart: initStart, PID: hostPID, PIDStart: cmdStart, Pidfd: pidfd}, nil
}

// expect reads one handshake line and checks its verb.
func expect(r *bufio.Reader, verb string) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("init handshake (waiting for %q): %w", verb, err)
	}
	line = strings.TrimSuffix(line, "\n")
	v, rest, _ := strings.Cut(line, " ")
	switch v {
	case verb:
		return rest, nil
	case msgError:
		return "", fmt.Errorf("%w: %s", ErrCommand, rest)
	}
	return "", fmt.Errorf("init handshake: got %q, want %q", line, verb)
}

// FindCommand returns the host pid of an init's first child.
func FindCommand(initPID int) (int, error) {
	t, err := procfs.ScanTree()
	if err != nil {
		return 0, err
	}
	if c := t.Children(initPID); len(c) > 0 {
		return c[0], nil
	}
	return 0, fmt.Errorf("init %d: %w", initPID, procfs.ErrGone)
}

// SetNice sets the nice value of every thread of pid (Linux nice is per
// thread), repeating until no new thread appears.
func SetNice(pid, nice int) error {
	done := map[int]bool{}
	for range 10 {
		ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
		if err != nil {
			return fmt.Errorf("nice pid %d: %w", pid, procfs.ErrGone)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh = true
			done[tid] = true
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("nice %d on pid %d thread %d: %w", nice, pid, tid, err)
			}
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// killAndReap ends a child that failed to start properly.
func killAndReap(pid, pidfd int) {
	if pidfd >= 0 {
		_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
	} else {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, 0, nil)
}
