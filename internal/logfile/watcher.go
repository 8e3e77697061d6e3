package logfile

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher tells followers when the files they follow change, through one
// inotify instance shared by all of them, with one watch per file however
// many follow it. Inotify instances are counted per user and are few (128
// for root by default): an instance per follower would let the callers of
// one daemon exhaust root's.
//
// The instance is made at the first follow, so that a daemon starts even
// while root has none to spare (a follow then fails, and the next tries
// again). Share one Watcher between every Follow, and Close it once they
// have all returned.
type Watcher struct {
	mu      sync.Mutex
	f       *os.File         // the inotify descriptor, non-blocking, read by loop; nil until made
	fd      int              // f's number (f.Fd would make f blocking)
	done    chan struct{}    // closed when loop returns
	watches map[int32]*watch // by watch descriptor: one per inode
	closed  bool
}

// watch is the inotify watch of one file and the followers it wakes.
type watch struct {
	subs  map[*subscription]struct{}
	ended chan struct{} // closed when the kernel drops the watch or the Watcher closes
}

// subscription is one follower's interest in one watch.
type subscription struct {
	w       *Watcher
	wd      int32
	changed chan struct{} // one pending wake-up at most
	ended   <-chan struct{}
}

// watchMask is what wakes a follower: writes and truncations.
const watchMask = unix.IN_MODIFY

// NewWatcher returns a Watcher; it holds no inotify instance yet.
func NewWatcher() *Watcher {
	return &Watcher{watches: map[int32]*watch{}}
}

// open makes the inotify instance and starts reading it; w.mu is held.
func (w *Watcher) open() error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify: %w", err)
	}
	w.f, w.fd, w.done = os.NewFile(uintptr(fd), "inotify"), fd, make(chan struct{})
	go w.loop(w.f, w.done)
	return nil
}

// Close stops the watcher; a follower still running returns an error.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	f, done := w.f, w.done
	w.mu.Unlock()
	var err error
	if f != nil {
		err = f.Close() // ends loop's read; the kernel drops every watch
		<-done
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, wt := range w.watches {
		close(wt.ended)
		delete(w.watches, wd)
	}
	return err
}

// subscribe watches the file open as f (its inode, through /proc, whatever
// its path has become) until the subscription is closed.
func (w *Watcher) subscribe(f *os.File) (*subscription, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errWatchEnded
	}
	if w.f == nil {
		if err := w.open(); err != nil {
			return nil, err
		}
	}
	wd, err := unix.InotifyAddWatch(w.fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), watchMask)
	if err != nil {
		return nil, fmt.Errorf("inotify watch: %w", err)
	}
	wt := w.watches[int32(wd)]
	if wt == nil {
		wt = &watch{subs: map[*subscription]struct{}{}, ended: make(chan struct{})}
		w.watches[int32(wd)] = wt
	}
	s := &subscription{w: w, wd: int32(wd), changed: make(chan struct{}, 1), ended: wt.ended}
	wt.subs[s] = struct{}{}
	return s, nil
}

// close ends the subscription; the last one of a file removes its watch.
func (s *subscription) close() {
	w := s.w
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := w.watches[s.wd]
	if w.closed || wt == nil || wt.ended != s.ended {
		return // the watch ended already
	}
	delete(wt.subs, s)
	if len(wt.subs) > 0 {
		return
	}
	delete(w.watches, s.wd)
	// Removed before the next add of the file, which then gets a new
	// descriptor; the IN_IGNORED this queues finds no watch.
	_, _ = unix.InotifyRmWatch(w.fd, uint32(s.wd))
}

// loop reads events until the descriptor is closed, waking the followers
// of each file that changed.
func (w *Watcher) loop(f *os.File, done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed; nothing else fails on an inotify descriptor
		}
		for b := buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
			w.handle(ev.Wd, ev.Mask)
			b = b[min(len(b), unix.SizeofInotifyEvent+int(ev.Len)):]
		}
	}
}

// handle wakes the followers an event concerns: those of its file, or all
// of them when the queue overflowed (wake-ups were lost).
func (w *Watcher) handle(wd int32, mask uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if mask&unix.IN_Q_OVERFLOW != 0 {
		for _, wt := range w.watches {
			wt.wake()
		}
		return
	}
	wt := w.watches[wd]
	if wt == nil {
		return
	}
	if mask&unix.IN_IGNORED != 0 {
		// The kernel dropped a watch still in use (its file system was
		// unmounted): its followers cannot go on.
		close(wt.ended)
		delete(w.watches, wd)
		return
	}
	wt.wake()
}

func (wt *watch) wake() {
	for s := range wt.subs {
		select {
		case s.changed <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}
