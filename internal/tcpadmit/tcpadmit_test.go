package tcpadmit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/gpusched/gpusched/internal/limits"
)

// portOwners says which uid owns each peer, by its port, and fails for a
// lookup whose second end is not the listener's: the kernel is asked for
// the socket of the peer, whose own end comes first.
type portOwners struct {
	listener netip.AddrPort
	mu       sync.Mutex
	uids     map[uint16]uint32
}

func (o *portOwners) set(c net.Conn, uid uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.uids[uint16(c.LocalAddr().(*net.TCPAddr).Port)] = uid
}

func (o *portOwners) Owner(peer, local netip.AddrPort) (uint32, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	uid, ok := o.uids[peer.Port()]
	if !ok || local != o.listener {
		return 0, errors.New("no such socket")
	}
	return uid, nil
}

// TestAdmissionByPeerOwner: on a real TCP listener, a local user's
// connection past their share is answered with the refusal and closed
// while another user's is admitted, and an admitted connection's Close
// gives its place back.
func TestAdmissionByPeerOwner(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	owners := &portOwners{listener: ln.Addr().(*net.TCPAddr).AddrPort(), uids: map[uint16]uint32{}}
	conns := limits.NewConns(8, 8, 1)
	l, err := listen(ln.(*net.TCPListener), conns, owners, 8, []byte("refused\n"), func(error) {})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dial := func(uid uint32) net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		owners.set(c, uid)
		return c
	}
	held := conns.Held

	dial(1000)
	first, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	refused := dial(1000)
	other := dial(1001)
	second, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 1); func() error { _, err := io.ReadFull(other, b); return err }() != nil {
		t.Fatal("user 1001's connection was not the one admitted")
	}
	if b, err := io.ReadAll(refused); string(b) != "refused\n" || err != nil {
		t.Fatalf("user 1000's second connection, past a share of 1: read %q, %v; want the refusal, then its end", b, err)
	}
	if n := held(1000); n != 1 {
		t.Fatalf("user 1000 holds %d connections after a refusal; want 1", n)
	}
	first.Close()
	first.Close()
	if n := held(1000); n != 0 {
		t.Fatalf("user 1000 holds %d connections after closing theirs; want 0", n)
	}
	if n := held(1001); n != 1 {
		t.Fatalf("user 1001 holds %d connections; want 1", n)
	}
}
