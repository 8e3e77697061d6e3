package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
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

// EachThread calls fn for every thread of this process: EachThreadOf
// for this process.
func EachThread(fn func(tid int) error) error { return EachThreadOf(os.Getpid(), fn) }

// EachThreadOf calls fn for every thread of process pid, and again for the
// threads it started meanwhile (a new thread is cloned from a running one
// and takes what it has: a name, a nice, an affinity), until a pass finds
// none new, or after ten passes. A thread that exits meanwhile is passed
// over; fn's first other error ends it. A process whose threads cannot be
// listed is ErrGone.
func EachThreadOf(pid int, fn func(tid int) error) error {
	done := map[int]bool{}
	for range 10 {
		ents, err := os.ReadDir(fileOf(pid, "/task"))
		if err != nil {
			return fmt.Errorf("threads of pid %d: %w", pid, ErrGone)
		}
		fresh := false
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := fn(tid); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			done[tid], fresh = true, true
		}
		if !fresh {
			return nil
		}
	}
	return nil
}

// NameThreads names every thread of this process name (/proc/PID/comm, at
// most 15 bytes: what top, ps -o comm and the kernel's traces show). A
// name not set changes nothing but what tools show.
func NameThreads(name string) {
	_ = EachThread(func(tid int) error {
		return os.WriteFile("/proc/self/task/"+strconv.Itoa(tid)+"/comm", []byte(name), 0)
	})
}
