package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// One page-server session runs as a pipeline, so that the socket, the
// hashing and the disk work at once: the reader (read) decodes commands
// and reads pages into pooled, page-aligned chunks; hash workers hash them
// and compare them with the parent's index, in any order; the writer takes
// them in arrival order, writes the pagemap entries, packs each chunk's
// changed pages together and reserves their place in the pages image; I/O
// workers write them there and return the chunks to the pool.
const (
	chunkPages = 256 // pages per chunk: 1 MiB
	chunkPool  = 16
	ioWorkers  = 2
)

// chunk is a piece of one ADD command's pages, or a control step for the
// writer (open a pagemap, close the session).
type chunk struct {
	op     writerOp
	key    pagemapKey
	vaddr  uint64
	n      int
	flags  uint32
	base   *pageHashes // the parent's pages of key, if any
	data   []byte
	hashes []pageHash
	same   []bool        // page i is unchanged from the parent
	hashed chan struct{} // one token once hashes and same are set
	result chan error    // opClose: the writer's outcome

	// Where the writer put the chunk's packed changed pages.
	file *pagesFile
	off  int64
	size int
}

type writerOp int

const (
	opPages writerOp = iota
	opOpen
	opClose
)

// pageSession serves one connection.
type pageSession struct {
	dir  string
	link string // target of dir/parent; "" for none
	base hashIndex
	conn net.Conn
	r    *bufio.Reader

	arena  []byte // the chunks' memory, page-aligned for O_DIRECT
	free   chan *chunk
	hashq  chan *chunk
	writeq chan *chunk
	ioq    chan *chunk
	abort  chan struct{}
	once   sync.Once
	err    error // the first failure; set before abort closes

	// Reader state.
	cur    pagemapKey
	open   bool // cur is open
	closed bool // CLOSE was answered

	// Writer state.
	img     *pagemapImage
	index   hashIndex
	pagesID uint32
	quota   writeQuota
	stats   PageStats
}

func newPageSession(dir, link string, base hashIndex, limit *atomic.Uint64, conn net.Conn) (*pageSession, error) {
	arena, err := unix.Mmap(-1, 0, chunkPool*chunkPages*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("chunk buffers: %w", err)
	}
	s := &pageSession{
		arena: arena,
		dir:   dir, link: link, base: base, conn: conn,
		quota:   writeQuota{limit: limit},
		r:       bufio.NewReaderSize(conn, 64<<10),
		free:    make(chan *chunk, chunkPool),
		hashq:   make(chan *chunk, chunkPool),
		writeq:  make(chan *chunk, chunkPool+4),
		ioq:     make(chan *chunk, chunkPool),
		abort:   make(chan struct{}),
		index:   make(hashIndex),
		pagesID: firstPagesID,
	}
	for i := range chunkPool {
		s.free <- &chunk{
			data:   arena[i*chunkPages*pageSize : (i+1)*chunkPages*pageSize : (i+1)*chunkPages*pageSize],
			hashes: make([]pageHash, chunkPages),
			same:   make([]bool, chunkPages),
			hashed: make(chan struct{}, 1),
		}
	}
	return s, nil
}

// fail records the session's first error and stops the pipeline.
func (s *pageSession) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.abort)
	})
}

func (s *pageSession) failed() bool {
	select {
	case <-s.abort:
		return true
	default:
		return false
	}
}

// run serves the connection until CRIU closes it after CLOSE, and returns
// the stats.
func (s *pageSession) run() (PageStats, error) {
	defer unix.Munmap(s.arena)
	var hashers, writer, writers sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 8) {
		hashers.Go(s.hashWorker)
	}
	writer.Go(s.writer)
	for range ioWorkers {
		writers.Go(s.ioWorker)
	}
	if err := s.read(); err != nil {
		s.fail(err)
	}
	close(s.hashq)
	close(s.writeq)
	hashers.Wait()
	writer.Wait()
	close(s.ioq)
	writers.Wait()
	s.stats.Written = s.quota.used
	return s.stats, s.err
}

// read decodes CRIU's commands.
func (s *pageSession) read() error {
	var hdr [psiSize2]byte
	size := 0 // psiSize or psiSize2, from the first command
	for {
		n := size
		if n == 0 {
			n = psiSize
		}
		if _, err := io.ReadFull(s.r, hdr[:n]); err != nil {
			if errors.Is(err, io.EOF) && s.closed {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return errors.New("connection closed before the transfer was complete")
			}
			return err
		}
		if s.closed {
			return errors.New("data after CLOSE")
		}
		if size == 0 {
			if size = psiLayoutOf(hdr[:psiSize]); size > psiSize {
				if _, err := io.ReadFull(s.r, hdr[psiSize:size]); err != nil {
					return err
				}
			}
		}
		pi, err := decodePSI(hdr[:size])
		if err != nil {
			return err
		}
		switch cmd := pi.command(); cmd {
		case psIovOpen, psIovOpen2:
			if err := s.openPagemap(pi.dstID); err != nil {
				return err
			}
			// "No parent": CRIU would then want the parent's inventory
			// (pid-reuse detection) and send holes only with --track-mem;
			// the comparison with the parent happens here instead.
			if cmd == psIovOpen2 {
				if _, err := s.conn.Write([]byte{0}); err != nil {
					return err
				}
			}
		case psIovParent:
			if _, err := s.conn.Write(binary.LittleEndian.AppendUint32(nil, 0)); err != nil {
				return err
			}
		case psIovAdd, psIovAddF, psIovHole:
			if err := s.addPages(pi); err != nil {
				return err
			}
		case psIovClose, psIovForceClose:
			err := s.finish()
			status := int32(0)
			if err != nil {
				status = -1 // CRIU fails the dump on a non-zero status
			}
			if _, werr := s.conn.Write(binary.LittleEndian.AppendUint32(nil, uint32(status))); err == nil {
				err = werr
			}
			if err != nil || cmd == psIovForceClose {
				return err
			}
			s.closed = true // wait for CRIU to close the connection
		default:
			return fmt.Errorf("unsupported page-server command %#x (lazy pages are not served)", pi.cmd)
		}
	}
}

func (s *pageSession) openPagemap(dstID uint64) error {
	key, err := keyOf(dstID)
	if err != nil {
		return err
	}
	s.cur, s.open = key, true
	return s.send(&chunk{op: opOpen, key: key})
}

// addPages reads one ADD command's pages into chunks for the pipeline.
func (s *pageSession) addPages(pi psi) error {
	if !s.open || pi.dstID != s.cur.dstID() {
		// As CRIU's own server: an ADD without OPEN opens the pagemap.
		if err := s.openPagemap(pi.dstID); err != nil {
			return err
		}
	}
	flags := pi.entryFlags()
	if flags&pePresent == 0 {
		// In-parent or lazy-only entries come only with --track-mem or
		// lazy pages, neither of which a dump to this server uses: every
		// page must be in the image or known to the parent's index.
		return fmt.Errorf("%s: entry at %#x with flags %#x and no pages: not supported", s.cur, pi.vaddr, flags)
	}
	if pi.vaddr%pageSize != 0 {
		return fmt.Errorf("%s: unaligned address %#x", s.cur, pi.vaddr)
	}
	base := s.base[s.cur]
	for left, vaddr := int(pi.nrPages), pi.vaddr; left > 0; {
		var c *chunk
		select {
		case c = <-s.free:
		case <-s.abort:
			return s.err
		}
		n := min(left, chunkPages)
		c.op, c.key, c.vaddr, c.n, c.flags, c.base = opPages, s.cur, vaddr, n, flags, base
		if _, err := io.ReadFull(s.r, c.data[:n*pageSize]); err != nil {
			s.free <- c
			return fmt.Errorf("%s: pages at %#x: %w", s.cur, vaddr, err)
		}
		s.hashq <- c // never blocks: it holds as many as the pool
		if err := s.send(c); err != nil {
			return err
		}
		left -= n
		vaddr += uint64(n) * pageSize
	}
	return nil
}

// send queues c for the writer.
func (s *pageSession) send(c *chunk) error {
	select {
	case s.writeq <- c:
		return nil
	case <-s.abort:
		return s.err
	}
}

// finish has the writer complete the image and waits for it.
func (s *pageSession) finish() error {
	c := &chunk{op: opClose, result: make(chan error, 1)}
	if err := s.send(c); err != nil {
		return err
	}
	select {
	case err := <-c.result:
		return err
	case <-s.abort:
		return s.err
	}
}

// hashWorker hashes chunks and compares them with the parent's pages.
func (s *pageSession) hashWorker() {
	for c := range s.hashq {
		if !s.failed() {
			for i := range c.n {
				c.hashes[i] = hashPage(c.data[i*pageSize : (i+1)*pageSize])
			}
			if c.base != nil {
				c.base.same(c.vaddr, c.hashes[:c.n], c.same[:c.n])
			} else {
				clear(c.same[:c.n])
			}
		}
		c.hashed <- struct{}{}
	}
}

// writer writes the images, in arrival order. After a failure it only
// recycles chunks.
func (s *pageSession) writer() {
	defer func() {
		if s.img != nil {
			s.img.abandon()
		}
	}()
	for c := range s.writeq {
		var err error
		op := c.op // c may be reused once recycled
		switch op {
		case opPages:
			<-c.hashed
			c.size = 0
			if !s.failed() {
				err = s.writeChunk(c)
			}
			if c.size > 0 {
				s.ioq <- c // never blocks: it holds as many as the pool
			} else {
				s.free <- c
			}
		case opOpen:
			if !s.failed() {
				err = s.openImage(c.key)
			}
		case opClose:
			if !s.failed() {
				err = s.complete()
			}
		}
		if err != nil {
			s.fail(spaceError(err))
		}
		if op == opClose {
			if s.failed() {
				c.result <- s.err
			} else {
				c.result <- nil
			}
		}
	}
}

func (s *pageSession) openImage(key pagemapKey) error {
	if err := s.closeImage(); err != nil {
		return err
	}
	if _, dup := s.index[key]; dup {
		return fmt.Errorf("%s: opened twice", key)
	}
	img, err := createPagemapImage(s.dir, key, s.pagesID, &s.quota)
	if err != nil {
		return err
	}
	s.pagesID++
	s.img = img
	s.index[key] = &pageHashes{}
	return nil
}

func (s *pageSession) closeImage() error {
	if s.img == nil {
		return nil
	}
	img := s.img
	s.img = nil
	return img.finish(func() error {
		if s.failed() {
			return s.err
		}
		return nil
	})
}

// writeChunk writes c's pagemap entries: in-parent ones for unchanged
// pages, present ones for the rest, whose data it packs at the front of
// c.data and reserves room for in the pages image (c.size bytes at c.off).
func (s *pageSession) writeChunk(c *chunk) error {
	if s.img == nil || s.img.key != c.key {
		return fmt.Errorf("%s: pages without an open pagemap", c.key)
	}
	if err := s.index[c.key].add(c.vaddr, c.hashes[:c.n]); err != nil {
		return fmt.Errorf("%s: %w", c.key, err)
	}
	packed := 0
	for i := 0; i < c.n; {
		j := i + 1
		for j < c.n && c.same[j] == c.same[i] {
			j++
		}
		vaddr, n := c.vaddr+uint64(i)*pageSize, uint64(j-i)
		if c.same[i] {
			// Unchanged pages CRIU marked lazy stay lazy: a lazy restore
			// then leaves them to our lazy-pages server, which reads them
			// through the parent link, instead of CRIU reading them all
			// before the tree runs (restore_priv_vma_content, criu/mem.c,
			// skips PE_LAZY entries only). CRIU's own holes carry
			// PE_PARENT alone (get_hole_flags, criu/page-xfer.c).
			if err := s.img.add(vaddr, n, peParent|c.flags&peLazy); err != nil {
				return err
			}
			s.stats.Reused += n
		} else {
			if err := s.img.add(vaddr, n, c.flags); err != nil {
				return err
			}
			if packed != i {
				copy(c.data[packed*pageSize:], c.data[i*pageSize:j*pageSize])
			}
			packed += j - i
		}
		i = j
	}
	s.stats.Pages += uint64(c.n)
	if packed == 0 {
		return nil
	}
	if err := s.quota.take(packed * pageSize); err != nil {
		return err
	}
	c.file, c.size = s.img.pages, packed*pageSize
	c.off = c.file.reserve(c.size)
	return nil
}

// ioWorker writes packed chunks into their pages images.
func (s *pageSession) ioWorker() {
	for c := range s.ioq {
		if s.failed() {
			c.file.inflight.Done()
		} else if err := c.file.writeAt(c.data[:c.size], c.off); err != nil {
			s.fail(spaceError(err))
		}
		s.free <- c
	}
}

// complete makes the image durable: the last pagemap, the index, the
// parent link and the directory.
func (s *pageSession) complete() error {
	if err := s.closeImage(); err != nil {
		return err
	}
	if err := writeIndex(s.dir, s.index, &s.quota); err != nil {
		return err
	}
	if s.link != "" {
		if err := linkParent(s.dir, s.link); err != nil {
			return err
		}
	}
	return syncDir(s.dir)
}

// linkParent points dir/parent at target, as CRIU's --prev-images-dir does.
func linkParent(dir, target string) error {
	path := filepath.Join(dir, "parent")
	err := os.Symlink(target, path)
	if errors.Is(err, os.ErrExist) {
		if old, rerr := os.Readlink(path); rerr == nil && old == target {
			return nil
		}
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
