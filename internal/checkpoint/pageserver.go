package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// pageServer receives one CRIU dump's memory pages (CRIU's page-server
// protocol, criu/page-xfer.c) and writes the pagemap and pages images into
// its directory. Given a parent image, it compares every page with the
// parent's page at the same address, by the hashes in the parent's index,
// and leaves unchanged ones in the parent (in-parent pagemap entries), so
// a repeat dump writes only what changed; CRIU's restore reads those pages
// through the directory's "parent" link, as for its own incremental dumps.
// A parent must therefore outlive every image that links to it.
//
// Besides the images it writes a page-hash index (gpusched-pagehash.bin)
// that covers every page of the image, so the next dump needs only this
// directory. The index is written last: an image without one is never
// used for dedup. CRIU reaches it through one end of a socketpair that the
// daemon hands the CRIU worker: no address anyone else could connect to
// (and feed a process's memory) ever exists. It serves in a process of its
// own (PageServerProcess), or, for its tests, in this one.
type pageServer struct {
	serving
	parent string        // "" or the parent images directory
	link   string        // relative target of dir/parent
	base   hashIndex     // the parent's index; nil: write every page
	limit  atomic.Uint64 // bytes the server may write; 0: no limit
	conn   net.Conn      // the server's end
}

// serving is what a page server, in this process or in its own, shares
// with its starter: CRIU's end of the connection until TakeCRIUEnd, and
// the transfer's outcome once done closes.
type serving struct {
	dir   string
	stop  func()        // ends the serving early (Close)
	done  chan struct{} // closed when serving has ended
	stats PageStats     // set before done closes
	err   error         // likewise

	mu      sync.Mutex
	criuEnd *os.File
	closed  bool // Close was called
}

// PageStats says what one dump sent and what reached the disk.
type PageStats struct {
	Pages   uint64 // memory pages in the image
	Reused  uint64 // pages left in the parent image (not written)
	Written uint64 // bytes written into the images directory by the page server (pages + pagemaps + hash index)
}

var errServerClosed = errors.New("page server closed")

// startPageServer serves one CRIU dump into dir over a socketpair whose
// other end TakeCRIUEnd gives out. parent, when not "", is the images directory of the
// previous dump of the same process tree (a snapshot restored from it is
// what is being dumped now); at the end of the transfer the server links
// dir/parent to it by a relative path, so that CRIU's restore finds it.
// A parent without an index gets no dedup; a damaged index is an error
// (a full dump, parent "", still works).
func startPageServer(dir, parent string) (*pageServer, error) {
	p, err := newPageServer(dir, parent)
	if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("page server for %s: %w", dir, err)
	}
	ours := os.NewFile(uintptr(fds[0]), "page-server")
	p.criuEnd = os.NewFile(uintptr(fds[1]), "page-server-criu")
	p.conn, err = net.FileConn(ours)
	ours.Close() // FileConn holds a dup
	if err != nil {
		p.criuEnd.Close()
		return nil, fmt.Errorf("page server for %s: %w", dir, err)
	}
	p.stop = func() { p.conn.Close() }
	go p.serve()
	return p, nil
}

// newPageServer is a page server of dir, its directories checked and its
// parent's index read, with no connection yet.
func newPageServer(dir, parent string) (*pageServer, error) {
	p := &pageServer{serving: serving{dir: dir, done: make(chan struct{})}, parent: parent}
	if err := p.prepare(); err != nil {
		return nil, fmt.Errorf("page server for %s: %w", dir, err)
	}
	return p, nil
}

// prepare checks the directories and reads the parent's index.
func (p *pageServer) prepare() error {
	if err := isDir(p.dir); err != nil {
		return err
	}
	if p.parent == "" {
		return nil
	}
	if err := isDir(p.parent); err != nil {
		return fmt.Errorf("parent: %w", err)
	}
	absDir, err := filepath.Abs(p.dir)
	if err != nil {
		return err
	}
	absParent, err := filepath.Abs(p.parent)
	if err != nil {
		return err
	}
	if absDir == absParent {
		return errors.New("parent is the images directory itself")
	}
	if p.link, err = filepath.Rel(absDir, absParent); err != nil {
		return err
	}
	if p.base, err = readIndex(p.parent); err != nil {
		return fmt.Errorf("parent index: %w", err)
	}
	return nil
}

func isDir(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", path)
	}
	return nil
}

// TakeCRIUEnd hands over CRIU's end of the connection (DumpOpts.PageServer),
// once; the caller must close it, and does so by giving it to CRIU.Dump.
func (p *serving) TakeCRIUEnd() *os.File {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.criuEnd
	p.criuEnd = nil
	return f
}

// Wait returns once CRIU has closed the connection after a complete
// transfer (or ctx ends: then the serving is stopped, or the connection
// fails), with the stats. A complete transfer is not a successful dump:
// CRIU closes the transfer even when the dump fails afterwards, so its own
// result decides.
func (p *serving) Wait(ctx context.Context) (PageStats, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Close()
		return p.stats, fmt.Errorf("page server for %s: %w", p.dir, ctx.Err())
	}
	return p.stats, p.err
}

// Close stops the serving (idempotent), e.g. when the dump failed before
// CRIU connected. It returns once nothing writes into the directory any
// more.
func (p *serving) Close() error {
	p.mu.Lock()
	p.closed = true
	if p.criuEnd != nil {
		p.criuEnd.Close()
		p.criuEnd = nil
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	default:
		p.stop()
		<-p.done
	}
	return nil
}

// stopped reports whether Close was called.
func (p *serving) stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// serve runs the session with CRIU.
func (p *pageServer) serve() {
	defer close(p.done)
	defer p.conn.Close()
	s, err := newPageSession(p.dir, p.link, p.base, &p.limit, p.conn)
	if err == nil {
		p.stats, err = s.run()
	}
	if err != nil {
		if p.stopped() {
			err = fmt.Errorf("%w (%w)", errServerClosed, err)
		}
		p.err = fmt.Errorf("page server for %s: %w", p.dir, err)
	}
}
