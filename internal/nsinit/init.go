package nsinit

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

// forwarded are the signals the init passes on to every process of its
// namespace. SIGKILL and SIGSTOP cannot be caught; the daemon sends those to
// the processes directly.
var forwarded = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM,
	unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH,
}

// Main runs the init and returns its exit status: the command's, 128+signal
// when a signal ended it, 125-127 when it never ran.
func Main() int {
	unix.CloseOnExec(statusFD)
	unix.CloseOnExec(syncFD)
	status := os.NewFile(statusFD, "status")
	sync := os.NewFile(syncFD, "sync")
	fail := func(code int, err error) int {
		writeReport(status, ExitReport{Error: err.Error()})
		fmt.Fprintf(sync, "%s %s\n", msgError, oneLine(err.Error()))
		fmt.Fprintf(os.Stderr, "gpusched-init: %v\n", err)
		return code
	}

	argv := os.Args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return fail(125, errors.New("no command"))
	}

	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{unix.SIGCHLD}, forwarded...)...)

	if _, err := fmt.Fprintln(sync, msgReady); err != nil {
		return fail(125, fmt.Errorf("daemon handshake: %w", err))
	}
	line, err := bufio.NewReader(sync).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != msgGo {
		return fail(125, errors.New("daemon went away before the command started"))
	}

	path, err := LookPath(argv[0], os.Getenv("PATH"), "")
	if err != nil {
		return fail(127, err)
	}
	child, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
	})
	if err != nil {
		return fail(126, fmt.Errorf("start %s: %w", argv[0], err))
	}
	hostPID, err := hostPIDOf(child.Pid)
	if err != nil {
		hostPID = 0 // the daemon finds it by scanning /proc
	}
	fmt.Fprintf(sync, "%s %d %d\n", msgStarted, child.Pid, hostPID)
	sync.Close()
	return supervise(child.Pid, sigs, status)
}

// supervise forwards signals and reaps until the command exits.
func supervise(pid int, sigs <-chan os.Signal, status *os.File) int {
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
				writeReport(status, ExitReport{Signal: int(ws.Signal())})
				return 128 + int(ws.Signal())
			}
			code := ws.ExitStatus()
			writeReport(status, ExitReport{Code: &code})
			return code
		}
	}
	return 125
}

// hostPIDOf maps a pid of the init's namespace to the host's: /proc is the
// host's mount, so a pidfd's fdinfo names the process by its host pid.
func hostPIDOf(nsPID int) (int, error) {
	fd, err := unix.PidfdOpen(nsPID, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pid:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("pidfd fdinfo has no Pid line")
}

func writeReport(f *os.File, r ExitReport) {
	b, _ := json.Marshal(r)
	_, _ = f.WriteAt(append(b, '\n'), 0)
	_ = f.Sync()
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
