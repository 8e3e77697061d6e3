package netguard

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fakeListener hands out the results queued in it, in order, then blocks
// until closed.
type fakeListener struct {
	results chan result
	closed  chan struct{}
	calls   int
}

type result struct {
	c   net.Conn
	err error
}

func newFakeListener(rs ...result) *fakeListener {
	l := &fakeListener{results: make(chan result, len(rs)), closed: make(chan struct{})}
	for _, r := range rs {
		l.results <- r
	}
	return l
}

func (l *fakeListener) Accept() (net.Conn, error) {
	l.calls++
	select {
	case r := <-l.results:
		return r.c, r.err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *fakeListener) Close() error   { close(l.closed); return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

func pipeConn() net.Conn {
	c, _ := net.Pipe()
	return c
}

// TestLimitWaitsForASlot: at the cap, Accept takes nothing more from the
// listener until a connection closes (a second Close gives back nothing
// more), and Close ends an Accept that waits for a slot.
func TestLimitWaitsForASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := newFakeListener(result{c: pipeConn()}, result{c: pipeConn()}, result{c: pipeConn()}, result{c: pipeConn()})
		l := Limit(inner, 2, NewRetry(func(error) {}))
		c1, err1 := l.Accept()
		_, err2 := l.Accept()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		got := make(chan error, 1)
		go func() {
			_, err := l.Accept()
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("a third connection accepted at a cap of 2: %v", err)
		default:
		}
		if inner.calls != 2 {
			t.Fatalf("the listener was asked %d times at the cap", inner.calls)
		}
		c1.Close()
		c1.Close()
		if err := <-got; err != nil {
			t.Fatalf("accept once a connection closed: %v", err)
		}

		go func() {
			_, err := l.Accept()
			got <- err
		}()
		synctest.Wait()
		if inner.calls != 3 {
			t.Fatalf("a second Close of one connection freed another slot (%d accepts)", inner.calls)
		}
		l.Close()
		if err := <-got; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept waiting for a slot, after Close: %v", err)
		}
	})
}

// TestLimitRetriesErrors: accept errors are retried with the backoff and
// logged once, the connection after them is returned, and a listener closed
// while backing off returns net.ErrClosed at once, its slot given back.
func TestLimitRetriesErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		emfile := result{err: &net.OpError{Op: "accept", Err: syscall.EMFILE}}
		inner := newFakeListener(emfile, emfile, emfile, result{c: pipeConn()})
		var logged int
		l := Limit(inner, 1, NewRetry(func(error) { logged++ }))
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != 35*time.Millisecond || logged != 1 {
			t.Fatalf("three failures waited %v (want 5+10+20ms) and logged %d times (want 1)", waited, logged)
		}
		c.Close()

		inner = newFakeListener(emfile)
		l = Limit(inner, 1, NewRetry(func(error) {}))
		got := make(chan error, 1)
		go func() {
			_, err := l.Accept()
			got <- err
		}()
		synctest.Wait() // backing off after the error
		l.Close()
		if err := <-got; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("closed while backing off: %v", err)
		}
		if len(l.slots) != 0 {
			t.Fatal("the slot of a failed Accept was kept")
		}
	})
}
