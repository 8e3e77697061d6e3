package daemon

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/pkg/api"
)

// procRuntime is the in-memory side of a live managed process: the pidfd of
// its init (so it is never confused with a reused pid) and a channel closed
// once its exit is recorded.
type procRuntime struct {
	id       string
	initPID  int
	pidfd    *os.File
	exited   chan struct{}
	child    bool        // the init is this daemon's own child and must be reaped
	sentKill atomic.Bool // this daemon SIGKILLed the init
	// dumping is set while CRIU dumps the tree, and while a lazy restore
	// still brings its memory in: its end is then the hibernate's or the
	// lazy thaw's to record, not an exit (see thawFromPageSource).
	dumping atomic.Bool
	exit    api.Exit // how the tree ended; set before exited is closed
}

// signal delivers sig to the init through its pidfd.
func (rt *procRuntime) signal(sig unix.Signal) error {
	rc, err := rt.pidfd.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		select {
		case <-rt.exited:
			return nil // the watcher recorded the exit and closed the pidfd meanwhile
		default:
		}
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return nil // already gone; the watcher records the exit
	}
	return serr
}

// runtimes indexes live processes by record id and owns their watchers.
type runtimes struct {
	mu      sync.Mutex
	m       map[string]*procRuntime
	wg      sync.WaitGroup
	closing chan struct{} // closed at shutdown
	// handover orders the removal of a dumped tree's cgroup, once it has
	// ended, against a restored tree of the same record joining it.
	handover sync.Mutex
}

func newRuntimes() *runtimes {
	return &runtimes{m: map[string]*procRuntime{}, closing: make(chan struct{})}
}

func (r *runtimes) get(id string) *procRuntime {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

// add registers a live process; pidfd must be nonblocking so that waiting
// on it parks a goroutine in the runtime poller rather than a thread.
func (r *runtimes) add(id string, initPID, pidfd int, child bool) *procRuntime {
	rt := &procRuntime{id: id, initPID: initPID, pidfd: os.NewFile(uintptr(pidfd), "pidfd"), exited: make(chan struct{}), child: child}
	r.mu.Lock()
	r.m[id] = rt
	r.mu.Unlock()
	return rt
}

// remove forgets rt, unless its record has a newer tree: the watcher of a
// tree dumped to disk may end after a restore has added the next one.
func (r *runtimes) remove(rt *procRuntime) {
	r.mu.Lock()
	if r.m[rt.id] == rt {
		delete(r.m, rt.id)
	}
	r.mu.Unlock()
}

// closeAll stops every watcher (at shutdown) and waits for them.
func (r *runtimes) closeAll() {
	select {
	case <-r.closing:
	default:
		close(r.closing)
	}
	r.mu.Lock()
	for _, rt := range r.m {
		rt.pidfd.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// waitExit blocks until the init behind rt has exited; false when the
// watch was stopped (pidfd closed at shutdown).
func waitExit(rt *procRuntime) bool {
	rc, err := rt.pidfd.SyscallConn()
	if err != nil {
		return false
	}
	err = rc.Read(func(fd uintptr) bool {
		// A pidfd polls readable once its process has exited.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		return err == nil && n > 0
	})
	return err == nil
}
