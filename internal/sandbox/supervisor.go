package sandbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwarded are the signals the supervisor passes on to every process of
// its namespace (those of its own uid: it holds no CAP_KILL). SIGKILL and
// SIGSTOP cannot be caught; the daemon sends those to the processes
// directly.
var forwarded = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM,
	unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH,
}

// Main runs the supervisor and returns its exit status: the command's,
// 128+signal when a signal ended it, 125-127 when it never ran.
func Main() int {
	// Before anything else: no ptrace, no /proc/<pid>/{mem,environ,fd} for
	// anyone without CAP_SYS_PTRACE, and nothing inherited by accident.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.CloseRange(firstFreeFD, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	for _, fd := range []int{logFD, 2, syncFD, statusFD} {
		unix.CloseOnExec(fd)
	}
	log := os.NewFile(logFD, "log")
	status := os.NewFile(statusFD, "status")
	sync := os.NewFile(syncFD, "sync")
	fail := func(code int, err error) int {
		writeReport(status, ExitReport{Error: err.Error()})
		verb := msgError
		if errors.Is(err, unix.EAGAIN) {
			verb = msgNoTasks
		}
		fmt.Fprintf(sync, "%s %s\n", verb, oneLine(err.Error()))
		fmt.Fprintf(log, "gpusched-init: %v\n", err)
		return code
	}

	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{unix.SIGCHLD}, forwarded...)...)

	if _, err := fmt.Fprintln(sync, msgReady); err != nil {
		return fail(125, fmt.Errorf("daemon handshake: %w", err))
	}
	spec, err := readSpec(bufio.NewReaderSize(sync, 64<<10))
	if err != nil {
		return fail(125, err)
	}
	hostProc, err := ownProc(spec.HostProc)
	if err != nil {
		return fail(125, err)
	}
	if err := os.Chdir(spec.Home); err != nil {
		return fail(125, fmt.Errorf("supervisor directory: %w", err))
	}
	pump, err := newPump(log, spec.LogMax, spec.LogKeep)
	if err != nil {
		unix.Close(hostProc)
		return fail(125, err)
	}
	child, err := startCommand(spec.command, pump.w)
	pump.w.Close() // the command holds the only write end now
	if err != nil {
		unix.Close(hostProc)
		code := 126
		if errors.Is(err, errNotFound) {
			code = 127
		}
		return fail(code, err)
	}
	hostPID, err := hostPIDOf(hostProc, child)
	unix.Close(hostProc) // on a host mount: a tree holding it could not be dumped
	if err != nil {
		hostPID = 0 // the daemon finds it among our children
	}
	fmt.Fprintf(sync, "%s %d %d\n", msgStarted, child, hostPID)
	sync.Close()
	go pump.run()
	code, rep := supervise(child, sigs)
	pump.finish()
	writeReport(status, rep)
	return code
}

// readSpec reads the daemon's "go" line.
func readSpec(r *bufio.Reader) (goSpec, error) {
	line, err := readLine(r, maxSpecBytes)
	if err != nil {
		return goSpec{}, fmt.Errorf("daemon went away before the command started: %w", err)
	}
	verb, rest, _ := strings.Cut(line, " ")
	var s goSpec
	if verb != msgGo {
		return s, fmt.Errorf("daemon handshake: got %q, want %q", verb, msgGo)
	}
	if err := json.Unmarshal([]byte(rest), &s); err != nil {
		return s, fmt.Errorf("daemon handshake: %w", err)
	}
	if len(s.Argv) == 0 {
		return s, errors.New("no command")
	}
	return s, nil
}

// errNotFound is a command that does not resolve to an executable file.
var errNotFound = errors.New("command not found")

// envValue is the value of key in env, the last one winning as in execve's
// getenv.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// supervise forwards signals and reaps until the command exits.
func supervise(pid int, sigs <-chan os.Signal) (int, ExitReport) {
	for sig := range sigs {
		if sig != unix.SIGCHLD {
			_ = unix.Kill(-1, sig.(syscall.Signal))
			continue
		}
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err != nil || wpid <= 0 {
				break
			}
			if wpid != pid {
				continue
			}
			if ws.Signaled() {
				return 128 + int(ws.Signal()), ExitReport{Signal: int(ws.Signal())}
			}
			code := ws.ExitStatus()
			return code, ExitReport{Code: &code}
		}
	}
	return 125, ExitReport{Error: "signal channel closed"}
}

// hostPIDOf maps a pid of the supervisor's namespace to the host's: a
// pidfd's fdinfo read through hostProc, the host's /proc, names the
// process by its host pid.
func hostPIDOf(hostProc, nsPID int) (int, error) {
	fd, err := unix.PidfdOpen(nsPID, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	info, err := unix.Openat(hostProc, "self/fdinfo/"+strconv.Itoa(fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	f := os.NewFile(uintptr(info), "fdinfo")
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("pidfd fdinfo has no Pid line")
}

func writeReport(f *os.File, r ExitReport) {
	b, _ := json.Marshal(r)
	if len(b) >= maxReportBytes {
		b, _ = json.Marshal(ExitReport{Code: r.Code, Signal: r.Signal, Error: r.Error[:maxReportBytes/2]})
	}
	_, _ = f.WriteAt(append(b, '\n'), 0)
	_ = f.Sync()
}
