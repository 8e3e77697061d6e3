package lazypages

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// faultPages is how much a fault brings in: the faulting page and what
// follows it in its run, up to 64 KiB (CRIU's lazy-pages daemon brings one
// page per fault, handle_page_fault in criu/uffd.c).
const faultPages = 16

// task is one restored process's userfaultfd and the pages it still
// lacks. Copies into it hold mu for reading; what changes runs (an event,
// a copy done) holds it for writing, and so does the handling of the
// fd's messages, from reading them to applying them: no copy runs between
// the kernel's report of a mapping change and the runs' update.
type task struct {
	s    *server
	fd   int
	img  *taskImage
	gone atomic.Bool // its process has exited (ESRCH): nothing more to fill

	mu      sync.RWMutex
	runs    runSet
	waiting []uint64 // faults to answer again (EAGAIN)
	buf     []byte   // the fault path's buffer
}

func newTask(s *server, fd int, img *taskImage, runs runSet) (*task, error) {
	buf, err := alignedBuf(faultPages * pageSize)
	if err != nil {
		return nil, err
	}
	return &task{s: s, fd: fd, img: img, runs: runs, buf: buf}, nil
}

// events serves the fd's messages until its process is gone.
func (t *task) events() {
	fds := []unix.PollFd{{Fd: int32(t.fd), Events: unix.POLLIN}}
	var b [msgSize]byte
	for {
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			t.s.fail(fmt.Errorf("poll userfaultfd of %d: %w", t.img.id, err))
			return
		}
		if fds[0].Revents&unix.POLLIN == 0 {
			return // POLLERR/POLLHUP: nothing more will come
		}
		changed := false
		for {
			// Messages are read and applied under t.mu, so that no copy
			// lands between the kernel's report of a change and ours; a
			// fault's read of the disk is made without it (faultAt).
			t.mu.Lock()
			n, err := unix.Read(t.fd, b[:])
			if errors.Is(err, unix.EAGAIN) {
				t.mu.Unlock()
				break // another thread's fault was already answered
			}
			if err != nil || n != msgSize {
				t.mu.Unlock()
				if err == nil {
					err = fmt.Errorf("short message (%d bytes)", n)
				}
				t.s.fail(fmt.Errorf("read userfaultfd of %d: %w", t.img.id, err))
				return
			}
			m := decodeMsg(b[:])
			if m.event == eventPagefault {
				t.mu.Unlock()
				t.s.faults.Add(1)
				err = t.faultAt(m.b &^ (pageSize - 1))
			} else {
				var c bool
				c, err = t.handle(m)
				changed = changed || c
				t.mu.Unlock()
			}
			if err != nil {
				t.s.fail(err)
				return
			}
		}
		t.mu.Lock()
		if changed && len(t.waiting) > 0 {
			w := t.waiting
			t.waiting = nil
			for _, addr := range w {
				if err := t.fault(addr); err != nil {
					t.mu.Unlock()
					t.s.fail(err)
					return
				}
			}
		}
		t.mu.Unlock()
		if changed {
			t.s.changed()
		}
	}
}

// handle answers one message (handle_uffd_event in criu/uffd.c); changed
// says whether it changed the mappings. t.mu is held.
func (t *task) handle(m uffdMsg) (changed bool, err error) {
	switch m.event {
	case eventRemove, eventUnmap:
		// madvise(MADV_DONTNEED or MADV_REMOVE) keeps the mapping, which
		// must stop faulting to us lest a later fault be filled from the
		// image; munmap takes the mapping (handle_remove).
		if m.event == eventRemove {
			if err := unregister(t.fd, m.a, m.b-m.a); errors.Is(err, unix.ENOMEM) {
				t.gone.Store(true) // the kernel's answer once the process has gone
			} else if err != nil {
				return false, fmt.Errorf("userfaultfd of %d: unregister [%#x, %#x): %w", t.img.id, m.a, m.b, err)
			}
		}
		t.runs = t.runs.cutAddr(m.a, m.b)
		return true, nil
	case eventRemap:
		t.runs = t.runs.remap(m.a, m.b, m.c)
		return true, nil
	case eventFork:
		// The child has a userfaultfd of its own, installed in this
		// process as the message was read, and lacks what its parent
		// lacked (handle_fork).
		child, err := newTask(t.s, int(int32(m.a)), t.img, append(runSet(nil), t.runs...))
		if err != nil {
			unix.Close(int(int32(m.a)))
			return false, err
		}
		t.s.add(child)
		return true, nil
	}
	return false, fmt.Errorf("userfaultfd of %d: unexpected event %#x", t.img.id, m.event)
}

// faultAt answers a fault at the page addr as fault does, reading the
// disk without t.mu, so that copies go on meanwhile; the runs may change
// during the read, so the data go wherever the image's pages are still
// lacking, and a fault they did not answer is answered under t.mu.
func (t *task) faultAt(addr uint64) error {
	t.mu.RLock()
	r, ok := t.runs.at(addr)
	var img uint64
	var seg segment
	if ok && !t.gone.Load() {
		img = r.img + (addr - r.start)
		seg, ok = t.img.segment(img)
	}
	n := uint64(0)
	if ok {
		n = min(faultPages, (r.end-addr)/pageSize, (seg.end()-img)/pageSize)
	}
	t.mu.RUnlock()
	if n == 0 {
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.fault(addr)
	}
	data := t.buf[:n*pageSize]
	err := seg.src.readAt(data, seg.off+int64(img-seg.vaddr))
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		return err
	}
	res := t.fill(img, data)
	t.apply(res)
	t.s.byFault.Add(res.pages)
	if res.err != nil {
		return res.err
	}
	for _, d := range res.done {
		if d[0] <= img && img < d[1] {
			return nil
		}
	}
	return t.fault(addr)
}

// fault answers a fault at the page addr: its data and what follows in
// its run when it still lacks them, else the zero page (a page of a lazy
// mapping that was never touched, or one just filled). t.mu is held.
func (t *task) fault(addr uint64) error {
	if t.gone.Load() {
		return nil
	}
	r, ok := t.runs.at(addr)
	if !ok {
		err := zeroPages(t.fd, addr, pageSize)
		switch {
		case err == nil, errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EAGAIN):
			t.wait(addr)
			return nil
		case errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENOSPC):
			t.gone.Store(true)
			return nil
		}
		return fmt.Errorf("userfaultfd of %d: zero page at %#x: %w", t.img.id, addr, err)
	}
	img := r.img + (addr - r.start)
	seg, ok := t.img.segment(img)
	if !ok {
		return fmt.Errorf("%s: no data for lazy page %#x", t.img.name(), img)
	}
	n := min(faultPages, (r.end-addr)/pageSize, (seg.end()-img)/pageSize)
	data := t.buf[:n*pageSize]
	if err := seg.src.readAt(data, seg.off+int64(img-seg.vaddr)); err != nil {
		return err
	}
	res := t.fill(img, data)
	t.apply(res)
	t.s.byFault.Add(res.pages)
	if res.retry {
		t.wait(addr)
	}
	return res.err
}

// wait keeps the fault at addr to answer again after the next mapping
// change; a thread waits on each, so there are few.
func (t *task) wait(addr uint64) {
	if len(t.waiting) < 1<<16 {
		t.waiting = append(t.waiting, addr)
	}
}

// fillResult is what fill did: the image ranges now in, whether some
// pages must be tried again once the mappings have settled, and a
// failure.
type fillResult struct {
	done  [][2]uint64
	pages uint64
	retry bool
	err   error
}

// fill copies data, the pages at image address img, to wherever the
// task's runs still lack them. It handles the kernel's answers as
// uffd_check_op_error in criu/uffd.c: a page already there (EEXIST: a
// fault brought it) counts as in; a mapping change under way (EAGAIN) or
// no registered mapping at the address (ENOENT: one changing, or a run
// crossing mappings that were split since) leaves the rest for later,
// page by page for ENOENT; the process gone (ESRCH, ENOSPC) ends the
// task. t.mu is held, for reading at least.
func (t *task) fill(img uint64, data []byte) (res fillResult) {
	hi := img + uint64(len(data))
	for i := sort.Search(len(t.runs), func(i int) bool { return t.runs[i].imgEnd() > img }); i < len(t.runs) && t.runs[i].img < hi; i++ {
		r := t.runs[i]
		a, b := max(img, r.img), min(hi, r.imgEnd())
		dst, src := r.start+(a-r.img), data[a-img:b-img]
		single := false
		for off := uint64(0); off < uint64(len(src)); {
			end := uint64(len(src))
			if single {
				end = off + pageSize
			}
			n, err := copyPages(t.fd, dst+off, src[off:end])
			if n > 0 {
				res.done = append(res.done, [2]uint64{a + off, a + off + n})
				res.pages += n / pageSize
				off += n
			}
			switch {
			case err == nil:
			case errors.Is(err, unix.EEXIST):
				res.done = append(res.done, [2]uint64{a + off, a + off + pageSize})
				off += pageSize
			case errors.Is(err, unix.ENOENT) && !single:
				single = true
			case errors.Is(err, unix.ENOENT):
				res.retry = true
				off += pageSize
			case errors.Is(err, unix.EAGAIN):
				res.retry = true
				off = uint64(len(src))
			case errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENOSPC):
				t.gone.Store(true)
				return res
			default:
				res.err = fmt.Errorf("userfaultfd of %d: copy %d bytes to %#x: %w", t.img.id, end-off, dst+off, err)
				return res
			}
		}
	}
	return res
}

// apply takes what fill did from the runs. t.mu is held for writing.
func (t *task) apply(res fillResult) {
	if t.gone.Load() {
		t.runs = nil
		return
	}
	for _, d := range res.done {
		t.runs = t.runs.cutImage(d[0], d[1])
	}
}

// left returns the task's runs still out (nil once its process is gone).
func (t *task) left() runSet {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if t.gone.Load() {
		return nil
	}
	return append(runSet(nil), t.runs...)
}

// alignedBuf is n bytes of page-aligned memory outside Go's heap, as
// O_DIRECT reads need and UFFDIO_COPY may read from at any time.
func alignedBuf(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
}
