package sockdiag

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound: no TCP socket of this host's network namespace has those
// two ends, as for a peer on another host.
var ErrNotFound = errors.New("sockdiag: no such local TCP socket")

// Layout of the messages, from include/uapi/linux/inet_diag.h:
//
//	struct inet_diag_sockid {            // 48 bytes
//		__be16 idiag_sport, idiag_dport;
//		__be32 idiag_src[4], idiag_dst[4];
//		__u32  idiag_if, idiag_cookie[2];
//	};
//	struct inet_diag_req_v2 {            // 56 bytes, after the nlmsghdr
//		__u8 sdiag_family, sdiag_protocol, idiag_ext, pad;
//		__u32 idiag_states;
//		struct inet_diag_sockid id;
//	};
//	struct inet_diag_msg {               // 72 bytes, after the nlmsghdr
//		__u8 idiag_family, idiag_state, idiag_timer, idiag_retrans;
//		struct inet_diag_sockid id;
//		__u32 idiag_expires, idiag_rqueue, idiag_wqueue, idiag_uid, idiag_inode;
//	};
const (
	sizeofSockID  = 48
	sizeofReqV2   = 8 + sizeofSockID
	sizeofDiagMsg = 4 + sizeofSockID + 20
	offMsgUID     = 4 + sizeofSockID + 12
	requestLen    = unix.SizeofNlMsghdr + sizeofReqV2
	// replyBuf holds one answer: the message and the attributes the kernel
	// adds to it (a few hundred bytes).
	replyBuf = 8 << 10
	// staleReplies bounds how many answers to earlier, timed-out requests
	// one lookup reads past before it gives up.
	staleReplies = 8
)

// TCP states (include/net/tcp_states.h) in which the answer is a full
// socket with an owner: not a listener, a request socket (SYN_RECV) or a
// TIME_WAIT socket, for which the kernel reports uid 0.
var ownedStates = [...]bool{1: true /* ESTABLISHED */, 4: true /* FIN_WAIT1 */, 5: true /* FIN_WAIT2 */, 8: true /* CLOSE_WAIT */, 9: true /* LAST_ACK */, 11: true /* CLOSING */}

// Conn is one netlink socket, reused by every lookup; lookups on it take
// turns. Each waits at most the timeout given to Open for its answer.
type Conn struct {
	mu  sync.Mutex
	fd  int
	seq uint32
	req [requestLen]byte
	buf []byte
}

// Open opens the netlink socket. Lookups wait at most timeout for the
// kernel's answer.
func Open(timeout time.Duration) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("sockdiag: netlink socket: %w", err)
	}
	tv := unix.NsecToTimeval(timeout.Nanoseconds())
	err = errors.Join(
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv),
		unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv),
		// Connected to the kernel (port 0), the socket takes no message
		// from any other sender: a local process cannot forge an answer
		// (net/netlink/af_netlink.c, netlink_getsockbyportid).
		unix.Connect(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}))
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sockdiag: netlink socket: %w", err)
	}
	return &Conn{fd: fd, buf: make([]byte, replyBuf)}, nil
}

// Close closes the netlink socket.
func (c *Conn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return unix.Close(c.fd)
}

// Owner returns the uid owning the connected TCP socket whose own end is
// local and whose peer is remote: for a connection accepted from this
// host, pass the accepted connection's remote address as local and its
// local address as remote. ErrNotFound when there is none.
func (c *Conn) Owner(local, remote netip.AddrPort) (uint32, error) {
	local = netip.AddrPortFrom(local.Addr().Unmap().WithZone(""), local.Port())
	remote = netip.AddrPortFrom(remote.Addr().Unmap().WithZone(""), remote.Port())
	if !local.IsValid() || !remote.IsValid() || local.Addr().Is4() != remote.Addr().Is4() {
		return 0, fmt.Errorf("sockdiag: %v to %v: not a TCP connection's ends", local, remote)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.request(local, remote)
	if _, err := unix.Write(c.fd, c.req[:]); err != nil {
		return 0, fmt.Errorf("sockdiag: request: %w", err)
	}
	for range staleReplies {
		n, err := unix.Read(c.fd, c.buf)
		if err != nil {
			return 0, fmt.Errorf("sockdiag: answer: %w", err) // EAGAIN: timed out
		}
		msg := c.buf[:n]
		if n < unix.SizeofNlMsghdr || binary.NativeEndian.Uint32(msg[8:12]) != c.seq {
			continue // the late answer to a request that timed out
		}
		return c.parse(msg, local, remote)
	}
	return 0, fmt.Errorf("sockdiag: no answer to request %d", c.seq)
}

// request fills c.req: one SOCK_DIAG_BY_FAMILY lookup (no NLM_F_DUMP) of
// the TCP socket with these ends.
func (c *Conn) request(local, remote netip.AddrPort) {
	b := c.req[:]
	clear(b)
	ne := binary.NativeEndian
	ne.PutUint32(b[0:], requestLen)
	ne.PutUint16(b[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(b[6:], unix.NLM_F_REQUEST)
	ne.PutUint32(b[8:], c.seq)
	r := b[unix.SizeofNlMsghdr:]
	r[0], r[1] = unix.AF_INET, unix.IPPROTO_TCP
	if local.Addr().Is6() {
		r[0] = unix.AF_INET6
	}
	ne.PutUint32(r[4:], ^uint32(0)) // idiag_states: any
	putSockID(r[8:], local, remote)
	ne.PutUint32(r[8+40:], ^uint32(0)) // idiag_cookie: INET_DIAG_NOCOOKIE
	ne.PutUint32(r[8+44:], ^uint32(0))
}

// putSockID writes the ports and addresses of an inet_diag_sockid.
func putSockID(id []byte, src, dst netip.AddrPort) {
	binary.BigEndian.PutUint16(id[0:], src.Port())
	binary.BigEndian.PutUint16(id[2:], dst.Port())
	s, d := src.Addr().AsSlice(), dst.Addr().AsSlice()
	copy(id[4:20], s)
	copy(id[20:36], d)
}

// sockIDEnds reads the two ends of an inet_diag_sockid of family fam,
// IPv4-mapped addresses (an AF_INET6 socket's IPv4 connection) unmapped.
func sockIDEnds(fam byte, id []byte) (src, dst netip.AddrPort) {
	addr := func(b []byte) netip.Addr {
		if fam == unix.AF_INET {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16([16]byte(b[:16])).Unmap()
	}
	src = netip.AddrPortFrom(addr(id[4:20]), binary.BigEndian.Uint16(id[0:]))
	dst = netip.AddrPortFrom(addr(id[20:36]), binary.BigEndian.Uint16(id[2:]))
	return src, dst
}

// parse reads the answer to the current request: the owner of the socket
// it names, which must be the one asked for (exact ends, a full socket).
func (c *Conn) parse(msg []byte, local, remote netip.AddrPort) (uint32, error) {
	ne := binary.NativeEndian
	length := int(ne.Uint32(msg[0:4]))
	if length < unix.SizeofNlMsghdr || length > len(msg) {
		return 0, fmt.Errorf("sockdiag: answer of %d bytes says it has %d", len(msg), length)
	}
	body := msg[unix.SizeofNlMsghdr:length]
	switch typ := ne.Uint16(msg[4:6]); typ {
	case unix.NLMSG_ERROR:
		if len(body) < 4 {
			return 0, errors.New("sockdiag: short error answer")
		}
		errno := unix.Errno(-int32(ne.Uint32(body[0:4])))
		if errno == unix.ENOENT {
			return 0, ErrNotFound
		}
		return 0, fmt.Errorf("sockdiag: lookup: %w", errno)
	case unix.SOCK_DIAG_BY_FAMILY:
	default:
		return 0, fmt.Errorf("sockdiag: answer of type %d", typ)
	}
	if len(body) < sizeofDiagMsg {
		return 0, fmt.Errorf("sockdiag: answer of %d bytes", len(body))
	}
	src, dst := sockIDEnds(body[0], body[4:4+sizeofSockID])
	if state := body[1]; int(state) >= len(ownedStates) || !ownedStates[state] || src != local || dst != remote {
		// Not the connection asked for (a listener or TIME_WAIT socket
		// the kernel's lookup also finds), or one with no owner left.
		return 0, ErrNotFound
	}
	return ne.Uint32(body[offMsgUID:]), nil
}
