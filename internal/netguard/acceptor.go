package netguard

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Acceptor batches are bounded so that a flood of refused connections
// leaves the accept loop now and then (Close is noticed, the runtime may
// run another goroutine on its thread).
const (
	// acceptBatch is how many connections one pass takes off the backlog
	// before it returns to Accept's loop.
	acceptBatch = 64
	// burstAccepts is how many connections in one pass make a burst: the
	// pass then wakes an idle thread of the runtime's to wait on the
	// network in its stead (see pass).
	burstAccepts = 8
)

// Verdict decides on a connection just accepted, given its descriptor,
// before the runtime knows of it: ok admits it, with a value that Accept
// hands back beside it; otherwise refusal, when not empty, is written to
// it (once, without waiting) and it is closed.
type Verdict[T any] func(fd int) (v T, refusal []byte, ok bool)

// Acceptor accepts a listening socket's connections as bare descriptors,
// so that refusing one costs the accept, what the verdict asks of the
// kernel, a write and a close: no registration with the runtime's poller,
// no goroutine, no timer. The net package's Accept makes each connection
// a net.Conn (its poller registration, both ends' addresses) before the
// caller can look at it, and a refusal then took a goroutine of its own;
// a user who opens connections in a loop cost the daemon twice as much.
// Only admitted connections become net.Conns.
type Acceptor[T any] struct {
	file    *os.File // the listening socket; the runtime's poller waits on it
	rc      syscall.RawConn
	addr    net.Addr
	verdict Verdict[T]
	undo    func(T) // gives back what the verdict took for a connection that could not be made a net.Conn
	closed  atomic.Bool
}

// listenerFile is a listener whose socket can be taken as a file
// (*net.UnixListener, *net.TCPListener).
type listenerFile interface {
	File() (*os.File, error)
	Addr() net.Addr
	Close() error
}

// Take has an Acceptor accept ln's connections from now on: it takes a
// descriptor of ln's socket of its own and closes ln, whether or not it
// fails (a Unix listener's file is left in place: ln must not unlink it on
// Close). undo gives back what the verdict took for an admitted connection
// that could not then be made a net.Conn (out of descriptors).
func Take[T any](ln listenerFile, verdict Verdict[T], undo func(T)) (*Acceptor[T], error) {
	f, err := ln.File()
	cerr := ln.Close()
	if err == nil {
		err = cerr
	}
	var rc syscall.RawConn
	if err == nil {
		rc, err = f.SyscallConn()
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, fmt.Errorf("listener %s: %w", ln.Addr(), err)
	}
	return &Acceptor[T]{file: f, rc: rc, addr: ln.Addr(), verdict: verdict, undo: undo}, nil
}

// Addr is the listening socket's address.
func (a *Acceptor[T]) Addr() net.Addr { return a.addr }

// Accept waits for the next connection its verdict admits and returns it
// with the verdict's value. Errors other than net.ErrClosed are the
// accept's own (running out of descriptors: the caller backs off).
func (a *Acceptor[T]) Accept() (net.Conn, T, error) {
	var zero T
	for {
		fd, v, err := a.pass()
		switch {
		case a.closed.Load():
			if fd >= 0 {
				unix.Close(fd)
				a.undo(v)
			}
			return nil, zero, net.ErrClosed
		case err != nil:
			return nil, zero, err
		case fd < 0:
			runtime.Gosched() // a batch of refusals is done: let others on this thread run
			continue
		}
		c, err := fileConn(fd)
		if err != nil {
			a.undo(v)
			return nil, zero, err
		}
		return c, v, nil
	}
}

// pass accepts until a connection is admitted (fd >= 0), the backlog has
// given acceptBatch, or an accept fails; it waits for the backlog on the
// runtime's poller. The goroutine running it was woken by the thread that
// waited on the network, and while it refuses a burst without blocking, no
// other thread waits there unless one is woken: the runtime polls the
// network only from a thread with nothing to run, or from its monitor
// every 10 ms (golang/go#51651), so other users' requests would wait for
// the burst. Starting a goroutine wakes an idle thread, which runs it and
// then waits on the network.
func (a *Acceptor[T]) pass() (fd int, v T, err error) {
	fd = -1
	rerr := a.rc.Read(func(lfd uintptr) bool {
		for n := 0; n < acceptBatch && !a.closed.Load(); n++ {
			if n == burstAccepts {
				go func() {}()
			}
			nfd, _, aerr := unix.Accept4(int(lfd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			switch {
			case aerr == unix.EAGAIN:
				return n > 0 // nothing taken yet: wait for the backlog
			case aerr == unix.EINTR || aerr == unix.ECONNABORTED:
				continue
			case aerr != nil:
				err = os.NewSyscallError("accept4", aerr)
				return true
			}
			got, refusal, ok := a.verdict(nfd)
			if ok {
				fd, v = nfd, got
				return true
			}
			if len(refusal) > 0 {
				_, _ = unix.Write(nfd, refusal) // a fresh socket's buffer takes a line; if not, the peer gets the close alone
			}
			unix.Close(nfd)
		}
		return true
	})
	if err == nil {
		err = rerr // the socket closed: Accept returns net.ErrClosed
	}
	return fd, v, err
}

// Close stops accepting: an Accept waiting returns net.ErrClosed, and one
// in a pass returns it at the pass's next connection.
func (a *Acceptor[T]) Close() error {
	a.closed.Store(true)
	return a.file.Close()
}

// fileConn makes an admitted descriptor a net.Conn (a *net.UnixConn or
// *net.TCPConn, as the socket is), closing fd; a variable so that tests
// can fail it.
var fileConn = func(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("accepted connection: %w", err)
	}
	return c, nil
}
