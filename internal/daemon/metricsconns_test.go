package daemon

import (
	"net"
	"net/netip"
	"testing"
	"time"
)

// fakeOwners says which uid owns each peer, by its port.
type fakeOwners map[uint16]uint32

func (o fakeOwners) Owner(peer, _ netip.AddrPort) (uint32, error) { return o[peer.Port()], nil }

// tcpStub is an accepted connection from peer port port; its Close waits
// for release.
type tcpStub struct {
	net.Conn
	port    int
	release chan struct{}
	closed  chan struct{}
}

func (c *tcpStub) LocalAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9400}
}
func (c *tcpStub) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: c.port}
}
func (c *tcpStub) Close() error {
	<-c.release
	close(c.closed)
	return nil
}

// stubListener hands out conns in order.
type stubListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *stubListener) Accept() (net.Conn, error) { return <-l.conns, nil }

// A refused metrics connection is closed off the accept loop, as the
// socket's refusals are: the loop goes on to the next connection while the
// refused one's close has not returned. A loop that refused inline never
// blocked while a flood kept the backlog full, and no thread of the
// runtime's watched the network meanwhile (metricsconns.go).
func TestMetricsRefusalIsClosedOffTheAcceptLoop(t *testing.T) {
	held := &tcpStub{port: 1}
	refused := &tcpStub{port: 2, release: make(chan struct{}), closed: make(chan struct{})}
	admitted := &tcpStub{port: 3}
	conns := newConnSet(4, 1)
	if err := conns.add(held, 1000, noUserName); err != nil {
		t.Fatal(err)
	}
	ln := &ownerListener{
		Listener: &stubListener{conns: make(chan net.Conn, 2)},
		owners:   fakeOwners{1: 1000, 2: 1000, 3: 1001},
		conns:    conns,
	}
	ln.Listener.(*stubListener).conns <- refused
	ln.Listener.(*stubListener).conns <- admitted

	got := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	select {
	case c := <-got:
		if oc, ok := c.(*ownedConn); !ok || oc.Conn != admitted {
			t.Fatalf("Accept returned %#v; want user 1001's connection", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept did not return user 1001's connection while user 1000's refused one was being closed")
	}
	close(refused.release)
	<-refused.closed
	if n := conns.byUID[1000]; n != 1 {
		t.Errorf("user 1000 holds %d connections; want the 1 held before", n)
	}
}
