package netguard

import (
	"errors"
	"net"
	"sync"
)

// Listener caps the connections a net.Listener has open at once. At the
// cap, Accept waits for one of them to close before it accepts again:
// connections beyond the cap wait in the kernel's listen backlog, costing
// the process neither a descriptor nor a goroutine. Accept errors other
// than a closed listener are retried through a Retry.
type Listener struct {
	net.Listener
	slots  chan struct{} // one token per open connection
	retry  *Retry
	closed chan struct{}
	once   sync.Once
}

// Limit wraps ln so that at most n (at least 1) of its connections are
// open at once; retry paces its accept errors.
func Limit(ln net.Listener, n int, retry *Retry) *Listener {
	return &Listener{Listener: ln, slots: make(chan struct{}, max(n, 1)), retry: retry, closed: make(chan struct{})}
}

// Accept waits for a free slot, then for a connection; the slot is given
// back when the connection is closed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			l.retry.Succeeded()
			return &conn{Conn: c, release: func() { <-l.slots }}, nil
		}
		if errors.Is(err, net.ErrClosed) {
			<-l.slots
			return nil, err
		}
		if !l.retry.Failed(err, l.closed) {
			<-l.slots
			return nil, net.ErrClosed
		}
	}
}

// Close stops the listener; an Accept waiting for a slot or backing off
// returns.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// conn gives its slot back on its first Close.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// NetConn is the connection c wraps.
func (c *conn) NetConn() net.Conn { return c.Conn }
