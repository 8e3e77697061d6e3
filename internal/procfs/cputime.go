package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// CPUTime is the CPU time pid's threads now running have used, in
// nanoseconds as the scheduler counts it (the first field of each
// /proc/PID/task/TID/schedstat); threads that have ended are not counted.
func CPUTime(pid int) (time.Duration, error) {
	dir := fileOf(pid, "/task")
	f, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	var sum time.Duration
	for _, n := range names {
		b, err := ReadFile(dir+"/"+n+"/schedstat", MaxNumbers)
		if err != nil {
			continue // the thread ended
		}
		ns, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte(" "))
		v, err := strconv.ParseInt(string(ns), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("pid %d: schedstat %q: %w", pid, b, err)
		}
		sum += time.Duration(v)
	}
	return sum, nil
}
