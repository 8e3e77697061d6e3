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

// NameThreads names every thread of this process name (/proc/PID/comm, at
// most 15 bytes: what top, ps -o comm and the kernel's traces show), over
// again while the runtime starts threads from ones not yet named (a thread
// takes its starter's name). A name not set changes nothing but what tools
// show.
func NameThreads(name string) {
	named := map[int]bool{}
	for range 4 {
		tids, err := SelfThreads()
		if err != nil {
			return
		}
		fresh := false
		for _, tid := range tids {
			if !named[tid] {
				_ = os.WriteFile("/proc/self/task/"+strconv.Itoa(tid)+"/comm", []byte(name), 0)
				named[tid], fresh = true, true
			}
		}
		if !fresh {
			return
		}
	}
}
