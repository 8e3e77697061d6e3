// Package tcpadmit admits a TCP listener's connections by the local user
// owning their peer, as a Unix socket admits by SO_PEERCRED: the kernel
// says which uid owns the peer's socket (sock_diag), and each local user
// holds at most their share of the listener (limits.Conns). A connection
// past it is answered with the refusal and closed before it is a net.Conn
// (netguard.Acceptor); at most max are open at once, the rest waiting in
// the kernel's backlog (netguard.Limit); accept errors back off
// (netguard.Retry).
package tcpadmit

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/netguard"
	"github.com/gpusched/gpusched/internal/sockdiag"
)

// Owners finds the local user behind a TCP connection's peer
// (sockdiag.Conn): the uid owning the socket with these two ends, or an
// error when no socket of this host has them.
type Owners interface {
	Owner(local, remote netip.AddrPort) (uint32, error)
}

// ownerTimeout bounds the kernel's answer to which user owns a peer (it
// answers at once; this is a guard).
const ownerTimeout = 100 * time.Millisecond

// Listen serves ln's connections through conns, the kernel naming each
// peer's user; where it cannot be asked, noOwners says why and every peer
// counts as limits.AnyPeer. refusal (may be empty) is written to a
// connection refused; at most max are open at once; failed accepts are
// told to acceptFailed as they are retried. ln is taken: closing the
// listener returned closes it.
func Listen(ln *net.TCPListener, conns *limits.Conns, max int, refusal []byte, acceptFailed func(error)) (l net.Listener, noOwners, err error) {
	diag, noOwners := sockdiag.Open(ownerTimeout)
	var owners Owners
	if noOwners == nil {
		owners = diag
	}
	l, err = listen(ln, conns, owners, max, refusal, acceptFailed)
	if noOwners != nil {
		return l, noOwners, err
	}
	if err != nil {
		diag.Close()
		return nil, nil, err
	}
	return &closing{Listener: l, also: diag}, nil, nil
}

// listen is Listen with owners to name the peers' users (nil: none).
func listen(ln *net.TCPListener, conns *limits.Conns, owners Owners, max int, refusal []byte, acceptFailed func(error)) (net.Listener, error) {
	a := &admission{owners: owners, conns: conns, refusal: refusal}
	acceptor, err := netguard.Take(ln, a.verdict, conns.Release)
	if err != nil {
		return nil, err
	}
	return netguard.Limit(&ownedListener{acceptor: acceptor, conns: conns}, max, netguard.NewRetry(acceptFailed)), nil
}

// closing is a listener that closes also with it.
type closing struct {
	net.Listener
	also io.Closer
}

func (c *closing) Close() error {
	err := c.Listener.Close()
	c.also.Close()
	return err
}

// admission is Listen's verdict on each connection.
type admission struct {
	owners  Owners
	conns   *limits.Conns
	refusal []byte
}

func (a *admission) verdict(fd int) (uint32, []byte, bool) {
	uid := a.peerUID(fd)
	if a.conns.Admit(uid, noUserName, "") != nil {
		return 0, a.refusal, false
	}
	return uid, nil, true
}

// noUserName: a refusal is the same for every user.
func noUserName() string { return "" }

// peerUID is the uid owning the peer of the connection on fd;
// limits.AnyPeer for a peer on another host, or when the lookup fails.
func (a *admission) peerUID(fd int) uint32 {
	if a.owners == nil {
		return limits.AnyPeer
	}
	local, err1 := unix.Getsockname(fd)
	peer, err2 := unix.Getpeername(fd)
	l, ok1 := addrPort(local)
	p, ok2 := addrPort(peer)
	if err1 != nil || err2 != nil || !ok1 || !ok2 {
		return limits.AnyPeer
	}
	uid, err := a.owners.Owner(p, l)
	if err != nil {
		return limits.AnyPeer
	}
	return uid
}

// addrPort is an IPv4 or IPv6 socket address's.
func addrPort(sa unix.Sockaddr) (netip.AddrPort, bool) {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)), true
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)), true
	}
	return netip.AddrPort{}, false
}

// ownedListener hands out the connections its acceptor admits, each
// giving its admission back on its first Close.
type ownedListener struct {
	acceptor *netguard.Acceptor[uint32]
	conns    *limits.Conns
}

func (l *ownedListener) Accept() (net.Conn, error) {
	c, uid, err := l.acceptor.Accept()
	if err != nil {
		return nil, err
	}
	return &ownedConn{Conn: c, uid: uid, release: func() { l.conns.Release(uid) }}, nil
}

func (l *ownedListener) Close() error   { return l.acceptor.Close() }
func (l *ownedListener) Addr() net.Addr { return l.acceptor.Addr() }

// ownedConn gives its admission back on its first Close.
type ownedConn struct {
	net.Conn
	uid     uint32 // its peer's owner; limits.AnyPeer: not known
	release func()
	once    sync.Once
}

// PeerUID is the uid owning the peer of c, a connection of a Listen
// listener (or one wrapping it, with a NetConn method as tls.Conn and
// netguard's have); false where it is not one or the uid is not known.
func PeerUID(c net.Conn) (uint32, bool) {
	for {
		switch w := c.(type) {
		case *ownedConn:
			return w.uid, w.uid != limits.AnyPeer
		case interface{ NetConn() net.Conn }:
			c = w.NetConn()
		default:
			return 0, false
		}
	}
}

func (c *ownedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
