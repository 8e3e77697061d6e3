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
)

// PageServer receives one CRIU dump's memory pages (CRIU's page-server
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
// used for dedup. Only connections from the server's own uid (root, for
// CRIU) are served.
type PageServer struct {
	dir    string
	parent string    // "" or the parent images directory
	link   string    // relative target of dir/parent
	base   hashIndex // the parent's index; nil: write every page
	ln     *net.TCPListener
	limit  atomic.Uint64 // bytes the server may write; 0: no limit
	done   chan struct{} // closed when serving ends

	mu     sync.Mutex
	conn   net.Conn
	closed bool

	stats PageStats // set before done closes
	err   error
}

// PageStats says what one dump sent and what reached the disk.
type PageStats struct {
	Pages   uint64 // memory pages in the image
	Reused  uint64 // pages left in the parent image (not written)
	Written uint64 // bytes written into the images directory by the page server (pages + pagemaps + hash index)
}

var errServerClosed = errors.New("page server closed")

// StartPageServer listens on 127.0.0.1 (an ephemeral TCP port) for one
// CRIU dump into dir. parent, when not "", is the images directory of the
// previous dump of the same process tree (a snapshot restored from it is
// what is being dumped now); at the end of the transfer the server links
// dir/parent to it by a relative path, so that CRIU's restore finds it.
// A parent without an index gets no dedup; a damaged index is an error
// (a full dump, parent "", still works).
func StartPageServer(dir, parent string) (*PageServer, error) {
	p := &PageServer{dir: dir, parent: parent, done: make(chan struct{})}
	if err := p.prepare(); err != nil {
		return nil, fmt.Errorf("page server for %s: %w", dir, err)
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, fmt.Errorf("page server for %s: %w", dir, err)
	}
	p.ln = ln
	go p.serve()
	return p, nil
}

// prepare checks the directories and reads the parent's index.
func (p *PageServer) prepare() error {
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

// Endpoint is what CRIU's dump options need: rpc.CriuPageServerInfo{Address, Port}.
func (p *PageServer) Endpoint() (address string, port int32) {
	a := p.ln.Addr().(*net.TCPAddr)
	return a.IP.String(), int32(a.Port)
}

// SetLimit caps the bytes the server writes into its directory; past it
// the transfer fails with ErrNoSpace, as on a full disk. 0 is no limit.
func (p *PageServer) SetLimit(bytes uint64) { p.limit.Store(bytes) }

// Wait returns once CRIU has closed the connection after a complete
// transfer (or ctx ends, or the connection fails), with the stats; it then
// closes the listener. A complete transfer is not a successful dump: CRIU
// closes the transfer even when the dump fails afterwards, so its own
// result decides.
func (p *PageServer) Wait(ctx context.Context) (PageStats, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.Close()
		return p.stats, fmt.Errorf("page server for %s: %w", p.dir, ctx.Err())
	}
	return p.stats, p.err
}

// Close stops the server (idempotent), e.g. when the dump failed before
// connecting. It returns once nothing writes into the directory any more.
func (p *PageServer) Close() error {
	p.mu.Lock()
	p.closed = true
	conn := p.conn
	p.mu.Unlock()
	p.ln.Close()
	if conn != nil {
		conn.Close()
	}
	<-p.done
	return nil
}

// serve takes the first connection from our own uid and runs its session.
func (p *PageServer) serve() {
	defer close(p.done)
	conn, err := p.accept()
	p.ln.Close() // one dump per server
	if err != nil {
		p.err = fmt.Errorf("page server for %s: %w", p.dir, err)
		return
	}
	defer conn.Close()
	s, err := newPageSession(p.dir, p.link, p.base, &p.limit, conn)
	if err == nil {
		p.stats, err = s.run()
	}
	if err != nil {
		p.mu.Lock()
		if p.closed {
			err = fmt.Errorf("%w (%w)", errServerClosed, err)
		}
		p.mu.Unlock()
		p.err = fmt.Errorf("page server for %s: %w", p.dir, err)
	}
}

func (p *PageServer) accept() (net.Conn, error) {
	for {
		conn, err := p.ln.AcceptTCP()
		if err != nil {
			p.mu.Lock()
			closed := p.closed
			p.mu.Unlock()
			if closed {
				return nil, fmt.Errorf("%w before CRIU connected", errServerClosed)
			}
			return nil, err
		}
		if uid, err := peerUID(conn); err != nil || uid != uint32(os.Geteuid()) {
			conn.Close() // not CRIU: never let another user feed a process's memory
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			conn.Close()
			return nil, fmt.Errorf("%w before CRIU connected", errServerClosed)
		}
		p.conn = conn
		p.mu.Unlock()
		return conn, nil
	}
}
