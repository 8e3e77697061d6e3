package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/oomscore"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/rlimit"
)

// ErrCommand means the supervisor ran but could not start the command (not
// found, not executable); Start's error wraps it with the explanation.
var ErrCommand = errors.New("command did not start")

// ErrNoTasks means the command did not start because the kernel refused
// its process, or its supervisor's (EAGAIN: a cgroup's pids.max, the
// host's pid_max, the user's processes against nproc); it wraps
// ErrCommand.
var ErrNoTasks = fmt.Errorf("%w", ErrCommand)

// Spec describes one managed process to start.
type Spec struct {
	SupervisorPath string   // binary to re-execute as supervisor (must call Main when IsSupervisor)
	Mark           string   // the supervisor's whole environment: one VAR=value naming its daemon
	Argv           []string // the command
	Env            []string // its whole environment
	Dir            string   // its working directory
	Cred           Cred
	Rlimits        rlimit.Set // the command's resource limits; nil: the supervisor's
	Nice           int        // applied to the supervisor, hence to the command, before it runs
	OOMScoreAdj    int        // likewise: the tree's oom_score_adj, and its floor where the daemon holds CAP_SYS_RESOURCE; one below the daemon's own floor leaves the daemon's
	CPUs           string     // the tree's own CPUs (cpuaffinity.Caller's list), the supervisor's from its birth; "": those the daemon gives users
	Home           string     // the supervisor's private directory (exists; root only)
	Log            *os.File   // the log (O_APPEND): the supervisor's stdout and stderr
	LogMax         int64      // rotate past this many bytes; 0: never
	LogKeep        int        // rotated copies kept
	Status         *os.File   // written by the supervisor when the command ends
	HostProc       string     // where the tree sees the host's /proc (an existing directory); "": nowhere
	// Recorded is called once the supervisor exists and before the command
	// runs; the daemon persists the supervisor's identity there. An error
	// aborts the start.
	Recorded func(initPID int, initStart uint64) error
}

// inheritNothing marks close-on-exec the descriptors this process
// inherited without it (Go opens its own so): a supervisor would hold them
// on the daemon's mounts, where CRIU cannot name them ("Can't lookup
// mount", mountns.go), and they are none of the tree's business.
var inheritNothing sync.Once

// Started identifies a running tree.
type Started struct {
	InitPID   int // the supervisor
	InitStart uint64
	PID       int // host pid of the command
	PIDStart  uint64
	Pidfd     int // of the supervisor, nonblocking; owned by the caller
}

// Start spawns the supervisor in a new PID and mount namespace and session as the
// spec's user, runs the handshake and returns once the command runs. On any
// error nothing is left running: the supervisor is killed and reaped.
func Start(ctx context.Context, s Spec) (*Started, error) {
	if err := s.Rlimits.Validate(); err != nil {
		return nil, err
	}
	if err := oomscore.Validate(s.OOMScoreAdj); err != nil {
		return nil, err
	}
	inheritNothing.Do(func() { _ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) })
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handshake socketpair: %w", err)
	}
	// Our end non-blocking, so that os.NewFile makes it pollable and the
	// handshake's deadline holds: the supervisor runs as the caller, who
	// may stop it (SIGSTOP) before it answers, and a blocking read waited
	// for good, the start, the caller's kill of it and the daemon's
	// shutdown with it.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("handshake socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "supervisor-sync")
	theirs := os.NewFile(uintptr(fds[1]), "supervisor-sync-child")
	defer ours.Close()

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		theirs.Close()
		return nil, err
	}
	var proc *os.Process
	err = cpuaffinity.StartOn(s.CPUs, func() (err error) {
		proc, err = os.StartProcess(s.SupervisorPath, []string{Argv0}, &os.ProcAttr{
			Dir:   "/", // the supervisor enters its private directory itself, once it holds its capabilities
			Env:   []string{s.Mark},
			Files: []*os.File{devnull, s.Log, s.Log, theirs, s.Status},
			Sys: &syscall.SysProcAttr{
				Setsid:      true,
				Cloneflags:  syscall.CLONE_NEWPID | syscall.CLONE_NEWNS, // the tree's own /proc (ownProc)
				Credential:  &syscall.Credential{Uid: s.Cred.UID, Gid: s.Cred.GID, Groups: s.Cred.Groups},
				AmbientCaps: supervisorCaps,
			},
		})
		return err
	})
	devnull.Close()
	theirs.Close()
	if errors.Is(err, unix.EAGAIN) {
		// The fork refused (the daemon's cgroup or the host at its
		// limit), or the execve as the user (the kernel's check of the
		// user's processes against the daemon's nproc limit, made after
		// setuid).
		return nil, fmt.Errorf("%w: start supervisor: %v (no process may start as uid %d now: the user has as many processes as the daemon's nproc limit, or the daemon's cgroup or the host allows no more)", ErrNoTasks, err, s.Cred.UID)
	}
	if err != nil {
		return nil, fmt.Errorf("start supervisor: %w", err)
	}
	pid := proc.Pid
	// Our unreaped child cannot be replaced by another process, so this
	// pidfd names it for sure.
	pidfd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	_ = proc.Release()
	if err != nil {
		killAndReap(pid, -1)
		return nil, fmt.Errorf("pidfd of supervisor %d: %w", pid, err)
	}
	st, err := handshake(ctx, s, ours, pid)
	if err != nil {
		killAndReap(pid, pidfd)
		unix.Close(pidfd)
		return nil, err
	}
	st.Pidfd = pidfd
	return st, nil
}

func handshake(ctx context.Context, s Spec, sync *os.File, pid int) (*Started, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = sync.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = sync.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	r := bufio.NewReaderSize(sync, maxLineBytes)

	if _, err := expect(r, msgReady); err != nil {
		return nil, err
	}
	initStart, err := procfs.StartTime(pid)
	if err != nil {
		return nil, fmt.Errorf("supervisor %d: %w", pid, err)
	}
	if s.Nice != 0 {
		if err := SetNice(pid, s.Nice); err != nil {
			return nil, err
		}
	}
	if err := oomscore.Set(pid, s.OOMScoreAdj); err != nil && !errors.Is(err, oomscore.ErrBelowFloor) {
		return nil, fmt.Errorf("supervisor %d: %w", pid, err)
	}
	if s.Recorded != nil {
		if err := s.Recorded(pid, initStart); err != nil {
			return nil, err
		}
	}
	spec, err := json.Marshal(goSpec{command: command{Argv: s.Argv, Env: s.Env, Dir: s.Dir, Rlimits: s.Rlimits},
		Home: s.Home, LogMax: s.LogMax, LogKeep: s.LogKeep, HostProc: s.HostProc})
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(sync, "%s %s\n", msgGo, spec); err != nil {
		return nil, fmt.Errorf("supervisor %d handshake: %w", pid, err)
	}
	rest, err := expect(r, msgStarted)
	if err != nil {
		return nil, err
	}
	f := strings.Fields(rest)
	if len(f) != 2 {
		return nil, fmt.Errorf("supervisor %d: malformed start report %q", pid, rest)
	}
	hostPID, err := commandOf(pid, f[1])
	if err != nil {
		return nil, err
	}
	cmdStart, err := procfs.StartTime(hostPID)
	if err != nil {
		cmdStart = 0 // the command already exited; the watcher reports that
	}
	return &Started{InitPID: pid, InitStart: initStart, PID: hostPID, PIDStart: cmdStart}, nil
}

// commandOf is the host pid of the supervisor's command: the one it
// reported when that is its child, else its child found in /proc. A pid
// that names another process is never taken. A command that is already
// gone (it exited at once) is the pid reported, or 0 when the supervisor
// could not name it: its exit is the watcher's to report.
func commandOf(initPID int, reported string) (int, error) {
	pid, err := strconv.Atoi(reported)
	if err != nil || pid < 0 {
		pid = 0
	}
	if pid > 0 {
		st, err := procfs.ReadStat(pid)
		if err == nil && st.PPID == initPID {
			return pid, nil
		}
		if err == nil {
			pid = 0 // another process's
		}
	}
	found, err := FindCommand(initPID)
	switch {
	case err == nil:
		return found, nil
	case errors.Is(err, procfs.ErrGone):
		return pid, nil
	}
	return 0, err
}

// expect reads one handshake line and checks its verb.
func expect(r *bufio.Reader, verb string) (string, error) {
	line, err := readLine(r, maxLineBytes)
	if err != nil {
		return "", fmt.Errorf("supervisor handshake (waiting for %q): %w", verb, err)
	}
	v, rest, _ := strings.Cut(line, " ")
	switch v {
	case verb:
		return rest, nil
	case msgError:
		return "", fmt.Errorf("%w: %s", ErrCommand, rest)
	case msgNoTasks:
		return "", fmt.Errorf("%w: %s", ErrNoTasks, rest)
	}
	return "", fmt.Errorf("supervisor handshake: got %q, want %q", line, verb)
}

// FindCommand returns the host pid of a supervisor's command: of its
// children (the command, and orphans of the command's tree it adopted, all
// forked after the command), the one with the lowest namespace pid.
func FindCommand(initPID int) (int, error) {
	pids, err := procfs.TreeOf(initPID)
	if err != nil {
		return 0, err
	}
	found, lowest := 0, 0
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err != nil || st.PPID != initPID {
			continue
		}
		if ns, err := procfs.NSPid(pid); err == nil && (found == 0 || ns < lowest) {
			found, lowest = pid, ns
		}
	}
	if found == 0 {
		return 0, fmt.Errorf("supervisor %d: %w", initPID, procfs.ErrGone)
	}
	return found, nil
}

// SetNice sets the nice value of every thread of pid (Linux nice is per
// thread, and a new thread or child takes its creator's), repeating until
// no new thread appears.
func SetNice(pid, nice int) error {
	return procfs.EachThreadOf(pid, func(tid int) error {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, nice); err != nil {
			return fmt.Errorf("nice %d on pid %d thread %d: %w", nice, pid, tid, err)
		}
		return nil
	})
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
