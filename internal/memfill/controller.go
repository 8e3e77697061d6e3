package memfill

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// writeTimeout bounds one line to a controller: one that stops reading is
// dropped rather than stalling the filler.
const writeTimeout = 10 * time.Second

// conn is a controller's connection: the spawning daemon's pipes or a
// rendezvous socket connection.
type conn interface {
	io.ReadWriteCloser
	SetWriteDeadline(time.Time) error
}

// stdioConn is the first controller's pair of pipes.
type stdioConn struct{ in, out *os.File }

func (s *stdioConn) Read(p []byte) (int, error)  { return s.in.Read(p) }
func (s *stdioConn) Write(p []byte) (int, error) { return s.out.Write(p) }

func (s *stdioConn) SetWriteDeadline(t time.Time) error {
	if err := s.out.SetWriteDeadline(t); !errors.Is(err, os.ErrNoDeadline) {
		return err
	}
	return nil
}

func (s *stdioConn) Close() error { return errors.Join(s.in.Close(), s.out.Close()) }

// takeStdio moves the first controller's pipes off fds 0 and 1, which are
// left reading and writing /dev/null: a stray write to stdout then reaches
// no controller and raises no SIGPIPE. Pipes are made non-blocking, so
// that the runtime poller serves them: writes time out, and a close ends a
// pending read.
func takeStdio() (conn, error) {
	var fds [2]int
	for i := range fds {
		fd, err := unix.FcntlInt(uintptr(i), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("dup fd %d: %w", i, err)
		}
		fds[i] = fd
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		if kind := st.Mode & unix.S_IFMT; kind == unix.S_IFIFO || kind == unix.S_IFSOCK {
			if err := unix.SetNonblock(fd, true); err != nil {
				return nil, err
			}
		}
	}
	null, err := unix.Open(os.DevNull, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(null)
	for i := range fds {
		if err := unix.Dup3(null, i, 0); err != nil {
			return nil, err
		}
	}
	return &stdioConn{in: os.NewFile(uintptr(fds[0]), "controller-in"), out: os.NewFile(uintptr(fds[1]), "controller-out")}, nil
}

// ctrl is one controller.
type ctrl struct {
	name string // "stdio" or "socket"
	c    conn
	wmu  sync.Mutex // one line at a time
}

func newCtrl(name string, c conn) *ctrl { return &ctrl{name: name, c: c} }

// send writes one line.
func (c *ctrl) send(m message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.write(m)
}

// write writes one line; the caller holds wmu.
func (c *ctrl) write(m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_ = c.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err = c.c.Write(append(b, '\n'))
	return err
}

// attach makes c the controller, superseding the current one, and starts
// serving it. Its hello goes out before any other line: c's write lock is
// held from before it is published until the hello is written.
func (h *helper) attach(c *ctrl) {
	c.wmu.Lock()
	h.mu.Lock()
	old := h.cur
	h.cur = c
	if h.orphan != nil {
		h.orphan.Stop()
		h.orphan = nil
	}
	h.mu.Unlock()
	st := h.hold.status()
	err := c.write(message{Hello: &h.hello, State: &st})
	c.wmu.Unlock()
	if old != nil {
		go func() { // old may be slow to read: it must not delay c
			_ = old.send(message{Error: "superseded by a new controller", Code: codeSuperseded})
			_ = old.c.Close()
		}()
		h.log.Printf("controller on %s superseded by one on %s", old.name, c.name)
	} else if c.name == "socket" {
		h.log.Printf("adopted by a controller on the socket: holding %d MiB", st.HeldMiB)
	}
	if err != nil {
		h.lost(c, err)
		return
	}
	go h.serve(c)
}

// serve answers c's requests in order until its connection ends or it is
// superseded.
func (h *helper) serve(c *ctrl) {
	sc := bufio.NewScanner(c.c)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	for sc.Scan() && h.current(c) {
		reply, release := h.handle(sc.Bytes())
		if err := c.send(reply); err != nil {
			h.lost(c, err)
			return
		}
		if release {
			h.exit("released by the controller")
			return
		}
	}
	h.lost(c, sc.Err())
}

// handle answers one request line, and reports whether it was a release.
func (h *helper) handle(line []byte) (message, bool) {
	var req request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var id struct{ ID uint64 }
		_ = json.Unmarshal(line, &id)
		return message{ID: id.ID, Error: fmt.Sprintf("bad request: %v", err)}, false
	}
	var st State
	switch req.Op {
	case opSet:
		if req.TargetMiB == nil {
			return message{ID: req.ID, Error: "bad request: set needs target_mib"}, false
		}
		p := params{targetMiB: *req.TargetMiB}
		if req.ReserveMiB != nil {
			p.reserveMiB = *req.ReserveMiB
		}
		st = h.hold.set(p)
	case opStatus:
		st = h.hold.status()
	case opRelease:
		st = h.hold.releaseAll()
	default:
		return message{ID: req.ID, Error: fmt.Sprintf("bad request: unknown op %q", req.Op)}, false
	}
	return message{ID: req.ID, State: &st}, req.Op == opRelease
}

// current reports whether c is the controller.
func (h *helper) current(c *ctrl) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cur == c
}

// lost closes c; if it was the controller, the filler holds on alone and
// the orphan timer starts.
func (h *helper) lost(c *ctrl, err error) {
	_ = c.c.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != c {
		return
	}
	h.cur = nil
	why := "connection closed"
	if err != nil {
		why = err.Error()
	}
	h.log.Printf("controller on %s lost (%s): holding on, releasing in %v unless adopted", c.name, why, h.cfg.orphan)
	h.orphan = time.AfterFunc(h.cfg.orphan, h.orphaned)
}

// orphaned ends the helper if no controller has adopted it meanwhile.
func (h *helper) orphaned() {
	h.mu.Lock()
	alone := h.cur == nil
	h.mu.Unlock()
	if alone {
		h.exit(fmt.Sprintf("no controller for %v", h.cfg.orphan))
	}
}

// broadcast tells the controller, if any, of a new state.
func (h *helper) broadcast(st State) {
	h.mu.Lock()
	c := h.cur
	h.mu.Unlock()
	if c == nil {
		return
	}
	if err := c.send(message{State: &st}); err != nil {
		h.lost(c, err)
	}
}
