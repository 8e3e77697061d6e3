package lazypages

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// The restore's side of the protocol (criu/uffd.c): it connects once to
// lazy-pages.socket in its work dir (prepare_lazy_pages_socket) and sends,
// for each restored process, its pid in the images as an int and then its
// userfaultfd in an SCM_RIGHTS message of one dummy byte (send_uffd,
// send_fd in include/common/scm.h); a zombie's pid comes negated and
// without an fd (lazy_pages_setup_zombie). Once every process is restored
// it sends LAZY_PAGES_RESTORE_FINISHED, as an int too
// (lazy_pages_finish_restore), and hangs up.
const (
	restoreFinished = 0x52535446 // "RSTF"; above any pid (PID_MAX_LIMIT is 1<<22)
	maxPID          = 1 << 22
	maxTasks        = 1 << 16
)

// Transfer sizes: the background reads the pages images in chunks of
// readChunk bytes, readers of them in flight once copying (this VM's disk
// reads 1 MiB requests six at a time at up to twice the speed of 8 MiB
// ones, as fio shows), into the read-ahead's pool (readahead.go), and
// copies them into the processes copyChunk bytes at a time, so that a
// fault waits for at most one such copy.
const (
	readChunk = 1 << 20
	readers   = 6
	copiers   = 2
	copyChunk = 1 << 20
)

// settleTimeout bounds the wait for a mapping change the kernel announced
// (EAGAIN, ENOENT) to reach the server as an event.
const settleTimeout = 5 * time.Second

// acceptTimeout bounds the wait for the restore to connect: CRIU's restore
// connects as it starts (prepare_lazy_pages_socket, before it forks the
// tree), and a server whose starter died before the restore would
// otherwise wait forever.
const acceptTimeout = 2 * time.Minute

// EnvHold, when set, names a file the server reads to its end before it
// streams the pages in the background: faults are served meanwhile (test
// knob: a page source stopped mid-transfer).
const EnvHold = "GPUSCHED_LAZYPAGES_HOLD"

// server is one lazy restore's page source.
type server struct {
	dir     string
	ahead   *ahead
	errc    chan error    // the first failure
	faults  atomic.Uint64 // faults answered
	byFault atomic.Uint64 // pages they brought in
	// Time the background transfer spent reading and copying, per reader
	// and per copier, and the bytes it had read when the copies began.
	readTime, copyTime time.Duration
	readAhead          int64

	mu      sync.Mutex
	tasks   []*task
	images  map[int]*taskImage
	settled chan struct{} // closed and replaced when a task's mappings changed
}

// serve serves the restore that connects to ln, with the images in dir,
// until every lazy page of every process is in.
func serve(dir string, ln *net.UnixListener, running *os.File, readersAhead int) error {
	if os.Getpagesize() != pageSize {
		return fmt.Errorf("page size %d: only %d is supported", os.Getpagesize(), pageSize)
	}
	s := &server{dir: dir, ahead: loadAhead(dir), errc: make(chan error, 1), images: map[int]*taskImage{}, settled: make(chan struct{})}
	ra, err := newReadAhead(readersAhead)
	if err != nil {
		return err
	}
	defer ra.close()
	ra.feeders.Go(func() { s.feed(ra) })
	// The starter closes the running pipe once the restore is done, or dies.
	runningc := make(chan struct{})
	go func() {
		_, _ = running.Read(make([]byte, 1))
		running.Close()
		close(runningc)
	}()
	conn, err := accept(ln, runningc)
	if err != nil {
		return err
	}
	start := time.Now()
	finished := make(chan error, 1)
	go func() { finished <- s.restoreSide(conn) }()
	select {
	case err = <-finished:
	case err = <-s.errc:
	}
	conn.Close()
	if err != nil {
		return err
	}
	finishedAt, faultsBefore := time.Now(), s.faults.Load()
	<-runningc // faults are answered meanwhile, by each task's events goroutine
	runningAt, faultsRunning := time.Now(), s.faults.Load()
	if hold := os.Getenv(EnvHold); hold != "" {
		_, _ = os.ReadFile(hold)
	}
	streamed := make(chan error, 1)
	go func() { streamed <- s.stream(ra) }()
	select {
	case err = <-streamed:
	case err = <-s.errc:
	}
	if err != nil {
		return err
	}
	var pages uint64
	for _, img := range s.images {
		pages += uint64(img.pagesTotal())
	}
	if s.ahead.err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ServerArgv0, s.ahead.err)
	}
	fmt.Fprintf(os.Stderr, "%s: %d lazy pages of %d processes in, %v after the restore connected, %v after it finished, %v after the processes ran (reading %v, copying %v, %d MiB read before the copies began); %d faults (%d before the restore finished, after %v; %d before they ran, after %v) brought %d pages\n",
		ServerArgv0, pages, len(s.images), time.Since(start).Round(time.Millisecond), time.Since(finishedAt).Round(time.Millisecond),
		time.Since(runningAt).Round(time.Millisecond), s.readTime.Round(time.Millisecond), s.copyTime.Round(time.Millisecond), s.readAhead>>20,
		s.faults.Load(), faultsBefore, finishedAt.Sub(start).Round(time.Millisecond), faultsRunning,
		runningAt.Sub(start).Round(time.Millisecond), s.byFault.Load())
	return nil
}

// accept waits for the restore's connection, at most acceptTimeout. A
// starter that went away before it (gone closed: it died, or gave up the
// restore) leaves nothing to serve: no restore connects any more, or one
// that does fails without its page source, leaving its snapshot intact.
func accept(ln *net.UnixListener, gone <-chan struct{}) (*net.UnixConn, error) {
	defer ln.Close()
	if err := ln.SetDeadline(time.Now().Add(acceptTimeout)); err != nil {
		return nil, err
	}
	type accepted struct {
		conn *net.UnixConn
		err  error
	}
	c := make(chan accepted, 1)
	go func() {
		conn, err := ln.AcceptUnix()
		c <- accepted{conn, err}
	}()
	var a accepted
	select {
	case a = <-c:
	case <-gone:
		// A restore that connected already waits in the backlog: take it.
		if !pending(ln) {
			ln.Close()
		}
		if a = <-c; a.err != nil {
			return nil, errors.New("the starter went away before a restore connected")
		}
	}
	if a.err != nil {
		return nil, fmt.Errorf("accept: %w", a.err)
	}
	return a.conn, nil
}

// pending reports whether a connection waits in ln's backlog.
func pending(ln *net.UnixListener) bool {
	raw, err := ln.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	_ = raw.Control(func(fd uintptr) {
		n, _ = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
	})
	return n > 0
}

// restoreSide takes the restore's processes until it says it finished.
func (s *server) restoreSide(conn *net.UnixConn) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	_ = raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return fmt.Errorf("peer credentials: %w", err)
	}
	if cred.Uid != 0 {
		return fmt.Errorf("the restore connected as uid %d, not root", cred.Uid)
	}
	var b [4]byte
	for n := 0; ; n++ {
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return errors.New("the restore hung up before it finished")
			}
			return fmt.Errorf("restore socket: %w", err)
		}
		pid := int32(binary.NativeEndian.Uint32(b[:]))
		switch {
		case pid == restoreFinished:
			return nil
		case pid < 0 && pid > -maxPID:
			continue // a zombie: no memory
		case pid <= 0 || pid > maxPID || n >= maxTasks:
			return fmt.Errorf("restore socket: bad pid %d (message %d)", pid, n)
		}
		fd, err := recvFD(conn)
		if err != nil {
			return fmt.Errorf("restore socket: userfaultfd of %d: %w", pid, err)
		}
		if err := s.open(int(pid), fd); err != nil {
			unix.Close(fd)
			return err
		}
	}
}

// recvFD receives the one fd of an SCM_RIGHTS message of one byte.
func recvFD(conn *net.UnixConn) (int, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := conn.ReadMsgUnix(b[:], oob)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	var fds []int
	for _, m := range msgs {
		f, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, f...)
		}
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, fmt.Errorf("%d fds where one was due", len(fds))
	}
	return fds[0], nil
}

// open starts serving the process with image id pid on its userfaultfd.
func (s *server) open(pid, fd int) error {
	s.mu.Lock()
	_, ok := s.images[pid]
	s.mu.Unlock()
	if ok {
		return fmt.Errorf("restore socket: pid %d sent twice", pid)
	}
	img, ok, err := s.ahead.take(pid)
	if !ok {
		img, err = loadTask(s.dir, pid)
	}
	if err != nil {
		return err
	}
	t, err := newTask(s, fd, img, append(runSet(nil), img.runs...))
	if err != nil {
		img.close()
		return err
	}
	s.mu.Lock()
	s.images[pid] = img
	s.mu.Unlock()
	s.add(t)
	return nil
}

// add serves t's events from now on.
func (s *server) add(t *task) {
	s.mu.Lock()
	s.tasks = append(s.tasks, t)
	s.mu.Unlock()
	go t.events()
}

// fail records the first failure.
func (s *server) fail(err error) {
	select {
	case s.errc <- err:
	default:
	}
}

// changed wakes whoever waits for mappings to settle.
func (s *server) changed() {
	s.mu.Lock()
	close(s.settled)
	s.settled = make(chan struct{})
	s.mu.Unlock()
}

// tasksOf returns the tasks served from img (a process and its forks), or
// all of them when img is nil.
func (s *server) tasksOf(img *taskImage) []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*task
	for _, t := range s.tasks {
		if img == nil || t.img == img {
			out = append(out, t)
		}
	}
	return out
}

func (img *taskImage) pagesTotal() int {
	n := 0
	for _, s := range img.segs {
		n += int(s.n)
	}
	return n
}

// chunk is one read of the background transfer: len bytes at off in src,
// holding pieces of lazy pages.
type chunk struct {
	img    *taskImage
	src    *pagesFile
	off    int64
	len    int
	pieces []piece
	buf    []byte
}

// piece is n pages at image address vaddr, at at in the chunk.
type piece struct {
	vaddr, n uint64
	at       int
}

// chunksOf lays the background transfer of imgs out: their lazy pages in
// the order of their files, in reads of up to readChunk bytes.
func chunksOf(imgs []*taskImage) []*chunk {
	var out []*chunk
	for _, img := range imgs {
		segs := slices.Clone(img.segs)
		slices.SortFunc(segs, func(a, b segment) int {
			if a.src != b.src {
				return slices.Index(img.files, a.src) - slices.Index(img.files, b.src)
			}
			return int(a.off - b.off)
		})
		var c *chunk
		for _, sg := range segs {
			for done := uint64(0); done < sg.n; {
				off := sg.off + int64(done*pageSize)
				if c == nil || c.src != sg.src || c.off+int64(c.len) != off || c.len == readChunk {
					c = &chunk{img: img, src: sg.src, off: off}
					out = append(out, c)
				}
				n := min(sg.n-done, uint64(readChunk-c.len)/pageSize)
				c.pieces = append(c.pieces, piece{vaddr: sg.vaddr + done*pageSize, n: n, at: c.len})
				c.len += int(n * pageSize)
				done += n
			}
		}
	}
	return out
}

// feed feeds ra the chunks of the images loaded ahead, then, once the
// copies start (every process has been handed over by then), those of
// the images loaded as their processes were handed over.
func (s *server) feed(ra *readAhead) {
	defer close(ra.chunks)
	select {
	case <-s.ahead.done:
	case <-ra.stop:
		return
	}
	if !ra.feed(chunksOf(s.ahead.order)) {
		return
	}
	select {
	case <-ra.copying:
	case <-ra.stop:
		return
	}
	var late []*taskImage
	s.mu.Lock()
	for _, img := range s.images {
		if !s.ahead.has(img) {
			late = append(late, img)
		}
	}
	s.mu.Unlock()
	ra.feed(chunksOf(late))
}

// stream brings every lazy page in: it lets ra's other readers start and
// copies what they read, in any order (a chunk of a process never handed
// over goes nowhere); then what is left (pages of forks, or whose copy met
// a mapping change) is brought in run by run.
func (s *server) stream(ra *readAhead) error {
	s.readAhead = ra.bytes.Load()
	close(ra.copying)
	var copyNS atomic.Int64
	copyErr := make(chan error, copiers)
	var cg sync.WaitGroup
	for range copiers {
		cg.Go(func() {
			for c := range ra.read {
				start := time.Now()
				for _, t := range s.tasksOf(c.img) {
					for _, p := range c.pieces {
						if err := t.fillLocked(p.vaddr, c.buf[p.at:p.at+int(p.n*pageSize)]); err != nil {
							copyErr <- err
							return
						}
					}
				}
				copyNS.Add(int64(time.Since(start)))
				ra.free <- c.buf[:cap(c.buf)]
			}
		})
	}
	cg.Wait()
	s.readTime = time.Duration(ra.readNS.Load()) / readers
	s.copyTime = time.Duration(copyNS.Load()) / copiers
	select {
	case err := <-copyErr:
		return err
	default:
	}
	select {
	case err := <-ra.errc:
		return err
	default:
	}
	buf := <-ra.free
	return s.sweep(buf[:copyChunk])
}

// fillLocked is fill in steps of copyChunk, each under t.mu.
func (t *task) fillLocked(img uint64, data []byte) error {
	for len(data) > 0 {
		n := min(len(data), copyChunk)
		t.mu.RLock()
		res := t.fill(img, data[:n])
		t.mu.RUnlock()
		t.mu.Lock()
		t.apply(res)
		t.mu.Unlock()
		if res.err != nil {
			return res.err
		}
		img += uint64(n)
		data = data[n:]
	}
	return nil
}

// sweep brings in what the ordered transfer left, until no task lacks a
// page. When a pass brings nothing in, it waits for the mappings to
// change first (the kernel refused a copy while a change was under way).
func (s *server) sweep(buf []byte) error {
	for {
		s.mu.Lock()
		settled := s.settled
		s.mu.Unlock()
		left, moved := 0, false
		for _, t := range s.tasksOf(nil) {
			for _, r := range t.left() {
				for img := r.img; img < r.imgEnd(); {
					seg, ok := t.img.segment(img)
					if !ok {
						return fmt.Errorf("%s: no data for lazy page %#x", t.img.name(), img)
					}
					n := min(uint64(len(buf)), r.imgEnd()-img, seg.end()-img)
					data := buf[:n]
					if err := seg.src.readAt(data, seg.off+int64(img-seg.vaddr)); err != nil {
						return err
					}
					before := t.left().pages()
					if err := t.fillLocked(img, data); err != nil {
						return err
					}
					moved = moved || t.left().pages() < before
					img += n
				}
			}
			if l := t.left(); len(l) > 0 {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if !moved {
			select {
			case <-settled:
			case <-time.After(settleTimeout):
				return fmt.Errorf("%d processes still lack pages the kernel will not take (no mapping change reported in %v)", left, settleTimeout)
			}
		}
	}
}
