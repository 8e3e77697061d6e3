package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"syscall"
)

// RealUID returns the real uid pid runs as: the first field of the Uid
// line of its status, which a process cannot change without privilege. A
// missing process gives ErrGone.
func RealUID(pid int) (uint32, error) {
	b, err := ReadFile(fileOf(pid, "/status"), MaxStatus)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, MaxStatus)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				uid, err := strconv.ParseUint(f[0], 10, 32)
				if err != nil {
					return 0, fmt.Errorf("pid %d: status: bad Uid line", pid)
				}
				return uint32(uid), nil
			}
		}
	}
	return 0, fmt.Errorf("pid %d: status: no Uid line", pid)
}
