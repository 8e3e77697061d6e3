package daemon

import (
	"net"
	"net/netip"
	"sync"
	"time"
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

// ownerListener admits the connections of a listener by the uid owning
// their peer, as the Unix socket admits by SO_PEERCRED (connSet): each
// local user holds at most its share, root keeps its reserve, and a peer
// of unknown uid (another host) counts only against the users' part of the
// cap. A connection past that is closed at once, unanswered.
type ownerListener struct {
	net.Listener
	owners tcpOwners // nil: no peer's uid is known
	conns  *connSet
}

func (l *ownerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.conns.add(c, l.peerUID(c), noUserName) != nil {
			// Closed on a goroutine of its own, as the socket's refusals
			// are: starting one wakes an idle thread of the runtime's,
			// which then waits on the network. A loop that refused
			// inline never blocked while a flood kept the backlog full,
			// and the thread running it was the one that had been
			// waiting: no thread watched the network, and other users'
			// requests waited for this loop to drain the backlog, or
			// for the runtime's monitor to poll, up to 10 ms later
			// (the runtime polls the network only between goroutines
			// and from its monitor: golang/go#51651).
			go c.Close()
			continue
		}
		return &ownedConn{Conn: c, conns: l.conns}, nil
	}
}

// peerUID is the uid owning c's peer; anyPeer for a peer on another host,
// or when the lookup fails.
func (l *ownerListener) peerUID(c net.Conn) uint32 {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	peer, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if l.owners == nil || !ok1 || !ok2 {
		return anyPeer
	}
	uid, err := l.owners.Owner(peer.AddrPort(), local.AddrPort())
	if err != nil || uid == anyPeer {
		return anyPeer
	}
	return uid
}

// noUserName: a refused metrics connection is closed without a message.
func noUserName() string { return "" }

// ownedConn gives its place in the connSet back on its first Close.
type ownedConn struct {
	net.Conn
	conns *connSet
	once  sync.Once
}

func (c *ownedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.conns.remove(c.Conn) })
	return err
}
