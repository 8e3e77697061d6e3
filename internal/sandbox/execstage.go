package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/rlimit"
)

// ExecArgv0 marks a re-executed binary as a tree's exec stage: the process
// that becomes the command. The supervisor starts it with the
// supervisor's capabilities, so the caller's processes can neither
// ptrace it nor take its descriptors; it puts the caller's resource
// limits in force on itself (limits are per process: the supervisor keeps
// its own), drops every capability of the thread that then, as the
// caller, finds the command, enters its directory and executes it.
const ExecArgv0 = "gpusched-exec"

// msgNotFound is the exec stage's report that the command does not
// resolve (msgError any other failure); no report at all means its execve
// succeeded (the socket closed on exec).
const msgNotFound = "notfound"

// IsExecStage reports whether this process was started as an exec stage.
func IsExecStage() bool { return len(os.Args) > 0 && os.Args[0] == ExecArgv0 }

// ExecMain runs the exec stage. It returns only when the command could not
// be executed: 127 when it does not resolve to an executable file, 126
// otherwise, having told the supervisor why.
func ExecMain() int {
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	sync := os.NewFile(syncFD, "exec-sync")
	unix.CloseOnExec(syncFD)
	c, err := readCommand(bufio.NewReaderSize(sync, 64<<10))
	if err == nil {
		runtime.LockOSThread() // never unlocked: the thread either becomes the command or exits
		err = execCommand(c)
	}
	verb, code, msg := msgError, 126, err.Error()
	if errors.Is(err, errNotFound) {
		verb, code, msg = msgNotFound, 127, strings.TrimPrefix(msg, errNotFound.Error()+": ")
	}
	fmt.Fprintf(sync, "%s %s\n", verb, oneLine(msg))
	return code
}

// readCommand reads the supervisor's one line.
func readCommand(r *bufio.Reader) (command, error) {
	var c command
	line, err := readLine(r, maxSpecBytes)
	if err != nil {
		return c, fmt.Errorf("exec stage: %w", err)
	}
	if err := json.Unmarshal([]byte(line), &c); err != nil {
		return c, fmt.Errorf("exec stage: %w", err)
	}
	if len(c.Argv) == 0 {
		return c, errors.New("no command")
	}
	return c, nil
}

// execCommand becomes c; it returns only on failure. It runs on a locked
// thread: capabilities are per thread, and execve gives the new image the
// calling thread's.
//
// The caller's limits come last, and under them the stage may be unable
// to start a thread: an address-space limit below the stage's own size
// leaves no room for a thread's stack, an nproc limit the user is at
// refuses the clone. A thread the runtime fails to make aborts the stage
// ("runtime/cgo: pthread_create failed"). So, with limits to apply,
// execUnderLimits becomes the command.
func execCommand(c command) error {
	if err := dropThreadCaps(); err != nil {
		return err
	}
	path, err := LookPath(c.Argv[0], envValue(c.Env, "PATH"), c.Dir)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotFound, err)
	}
	if err := unix.Chdir(c.Dir); err != nil {
		return fmt.Errorf("dir %s: %w", c.Dir, err)
	}
	if c.Rlimits != nil {
		return execUnderLimits(path, c)
	}
	err = syscall.Exec(path, c.Argv, c.Env)
	return fmt.Errorf("start %s: %w", c.Argv[0], err)
}

// execUnderLimits becomes the command under c's limits. Everything execve
// needs (the C copies of path, argv and environment) is made first; the
// garbage of the spec is collected and the collector turned off; the
// runtime is left one P, which this goroutine holds, so that a background
// goroutine that wakes (the sweeper, the scavenger) has none to run on and
// starts no thread. Between the limits (raw prlimit calls) and execve (a
// raw call too: syscall.Exec would copy argv and environment after them)
// the stage allocates nothing and blocks nowhere. A set that does not name
// nofile leaves the command the soft nofile limit Go raised in the stage
// at start, which syscall.Exec would have restored; the daemon's sets name
// every limit.
func execUnderLimits(path string, c command) error {
	pathp, err := syscall.BytePtrFromString(path)
	if err != nil {
		return fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	argvp, err := syscall.SlicePtrFromStrings(c.Argv)
	if err != nil {
		return fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	envp, err := syscall.SlicePtrFromStrings(c.Env)
	if err != nil {
		return fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	runtime.GC()
	debug.SetGCPercent(-1)
	runtime.GOMAXPROCS(1)
	if err := rlimit.Apply(c.Rlimits); err != nil {
		return fmt.Errorf("the caller's resource limits: %w", err)
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(pathp)),
		uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	return fmt.Errorf("start %s: %w", c.Argv[0], errno)
}

// startCommand starts the command, stdout and stderr into out, through an
// exec stage, and returns its pid once it runs.
func startCommand(c command, out *os.File) (int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("exec stage socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "exec-sync")
	theirs := os.NewFile(uintptr(fds[1]), "exec-sync-child")
	defer ours.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		theirs.Close()
		return 0, err
	}
	p, err := os.StartProcess("/proc/self/exe", []string{ExecArgv0}, &os.ProcAttr{
		Dir: "/", Env: []string{}, Files: []*os.File{devnull, out, out, theirs},
		Sys: &syscall.SysProcAttr{AmbientCaps: supervisorCaps},
	})
	devnull.Close()
	theirs.Close()
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			err = fmt.Errorf("%w (the tree's cgroup allows no more processes: pids.max)", err)
		}
		return 0, fmt.Errorf("start %s: %w", c.Argv[0], err)
	}
	pid := p.Pid
	_ = p.Release() // reaped by supervise, or below
	err = handOver(ours, c)
	if err != nil {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil)
		return 0, err
	}
	return pid, nil
}

// handOver sends the exec stage its command and waits until it has
// executed it (the socket closes on exec) or says why it could not.
func handOver(sync *os.File, c command) error {
	spec, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := sync.Write(append(spec, '\n')); err != nil {
		return fmt.Errorf("exec stage: %w", err)
	}
	line, err := readLine(bufio.NewReaderSize(sync, maxLineBytes), maxLineBytes)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("exec stage: %w", err)
	}
	verb, msg, _ := strings.Cut(line, " ")
	if verb == msgNotFound {
		return fmt.Errorf("%w: %s", errNotFound, msg)
	}
	return errors.New(msg)
}
