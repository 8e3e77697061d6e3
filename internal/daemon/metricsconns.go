package daemon

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/netguard"
)

// metricsOwnerTimeout bounds the kernel's answer to which user owns a
// metrics connection's peer (it answers at once; this is a guard).
const metricsOwnerTimeout = 100 * time.Millisecond

// tcpOwners finds the local user behind a TCP connection's peer
// (sockdiag.Conn): the uid owning the socket with these two ends, or an
// error when no socket of this host has them.
type tcpOwners interface {
	Owner(local, remote netip.AddrPort) (uint32, error)
}

// metricsAdmission admits the metrics listener's connections by the uid
// owning their peer, as the Unix socket admits by SO_PEERCRED (connSet):
// each local user holds at most its share, root keeps its reserve, and a
// peer of unknown uid (another host) counts only against the users' part
// of the cap. A connection past that is closed at once, unanswered.
type metricsAdmission struct {
	owners tcpOwners // nil: no peer's uid is known
	conns  *connSet
}

// verdict is the metrics listener's netguard.Verdict.
func (m *metricsAdmission) verdict(fd int) (uint32, []byte, bool) {
	uid := m.peerUID(fd)
	if m.conns.admit(uid, noUserName) != nil {
		return 0, nil, false
	}
	return uid, nil, true
}

// peerUID is the uid owning the peer of the connection on fd; anyPeer for
// a peer on another host, or when the lookup fails.
func (m *metricsAdmission) peerUID(fd int) uint32 {
	if m.owners == nil {
		return anyPeer
	}
	local, err1 := unix.Getsockname(fd)
	peer, err2 := unix.Getpeername(fd)
	l, ok1 := addrPort(local)
	p, ok2 := addrPort(peer)
	if err1 != nil || err2 != nil || !ok1 || !ok2 {
		return anyPeer
	}
	uid, err := m.owners.Owner(p, l)
	if err != nil || uid == anyPeer {
		return anyPeer
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

// noUserName: a refused metrics connection is closed without a message.
func noUserName() string { return "" }

// ownedListener is the metrics server's listener: the connections its
// acceptor admits, each giving its admission back on its first Close.
type ownedListener struct {
	acceptor *netguard.Acceptor[uint32]
	conns    *connSet
}

func (l *ownedListener) Accept() (net.Conn, error) {
	c, uid, err := l.acceptor.Accept()
	if err != nil {
		return nil, err
	}
	return &ownedConn{Conn: c, release: func() { l.conns.release(uid) }}, nil
}

func (l *ownedListener) Close() error   { return l.acceptor.Close() }
func (l *ownedListener) Addr() net.Addr { return l.acceptor.Addr() }

// ownedConn gives its admission back on its first Close.
type ownedConn struct {
	net.Conn
	release func()
	once    sync.Once
}

func (c *ownedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
