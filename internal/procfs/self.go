package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SelfPID returns the calling process's pid as the proc mount this package
// reads sees it: its host pid when that is the host's /proc (a simulated
// job in a managed tree reads it through UseHostProc), where getpid() would
// give its namespace pid (NVML reports host pids). It reads the self link,
// which opens nothing, and the first NSpid field of self/status only when
// the link cannot be read: a CRIU dump that meets a process holding a file
// of another PID namespace's proc open cannot be restored ("Can't open
// file .../hostproc/<pid>/status on restore"), and the simulated job asks
// on every tick.
func SelfPID() (int, error) {
	link, lerr := os.Readlink(root + "/self")
	if lerr == nil {
		pid, err := strconv.Atoi(link)
		if err == nil {
			return pid, nil
		}
		lerr = err
	}
	npid, nerr := statusNSpid(root + "/self/status")
	if nerr == nil {
		return npid, nil
	}
	return 0, fmt.Errorf("host pid: readlink %s/self: %v; %w", root, lerr, nerr)
}

// statusNSpid returns the first field of the NSpid line of a status file.
func statusNSpid(path string) (int, error) {
	b, err := ReadFile(path, MaxStatus)
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			return strconv.Atoi(f[0])
		}
	}
	return 0, fmt.Errorf("%s: no NSpid line", path)
}

// NSPid returns pid's pid in its innermost PID namespace (the last field of
// the NSpid line of its status): what it keeps across a CRIU restore.
func NSPid(pid int) (int, error) {
	b, err := ReadFile(Path(pid, "/status"), MaxStatus)
	if errors.Is(err, ErrTruncated) {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				return strconv.Atoi(f[len(f)-1])
			}
		}
	}
	return 0, fmt.Errorf("pid %d: no NSpid line", pid)
}
