package procfs

import (
	"os"
	"strconv"
)

// SelfThreads is this process's thread ids (/proc/self/task): the threads
// there are now; the Go runtime may start more at any time.
func SelfThreads() ([]int, error) {
	f, err := os.Open("/proc/self/task")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	tids := make([]int, 0, len(names))
	for _, n := range names {
		if tid, err := strconv.Atoi(n); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
