package simgpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// procRoot is the proc mount read by this package.
const procRoot = "/proc"

// SelfPID returns the calling process's pid as seen by the /proc mount, which
// is the host pid for a process in its own PID namespace that kept the host's
// /proc (getpid would return its namespace pid). It reads the /proc/self link
// and cross-checks it with the first NSpid field of /proc/self/status; either
// one alone suffices.
func SelfPID() (int, error) {
	link, lerr := os.Readlink(procRoot + "/self")
	lpid := 0
	if lerr == nil {
		lpid, lerr = strconv.Atoi(link)
	}
	npid, nerr := statusNSpid(procRoot + "/self/status")
	switch {
	case lerr == nil && nerr == nil && lpid != npid:
		return 0, fmt.Errorf("host pid: /proc/self is %d but NSpid says %d", lpid, npid)
	case lerr == nil:
		return lpid, nil
	case nerr == nil:
		return npid, nil
	}
	return 0, fmt.Errorf("host pid: readlink /proc/self: %v; %w", lerr, nerr)
}

// statusNSpid returns the first field of the NSpid line of a status file.
func statusNSpid(path string) (int, error) {
	b, err := os.ReadFile(path)
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

// StartTime returns the start time of process pid (field 22 of
// /proc/<pid>/stat, clock ticks since boot). Together with the pid it
// identifies a process across pid reuse. A missing process gives an error
// wrapping ErrNoSuchProcess.
func StartTime(pid int) (uint64, error) {
	st, err := readStat(pid)
	return st.start, err
}

// procStat holds the fields of /proc/<pid>/stat this package uses.
type procStat struct {
	state byte   // field 3: R, S, D, Z, X, ...
	start uint64 // field 22
}

// exited reports whether the process has exited (zombie or dead) and so holds
// no device memory any more, as with a real driver.
func (s procStat) exited() bool { return s.state == 'Z' || s.state == 'X' }

func readStat(pid int) (procStat, error) {
	if pid <= 0 {
		return procStat{}, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	b, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, fs.ErrNotExist) {
		return procStat{}, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return parseStat(pid, b)
}

// parseStat parses a stat line. The comm field may hold spaces and
// parentheses, so fields are counted after the last ')'.
func parseStat(pid int, b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("process %d: malformed stat %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so field 22 is f[19].
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("process %d: malformed stat %q", pid, b)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: malformed start time: %w", pid, err)
	}
	return procStat{state: f[0][0], start: start}, nil
}
