package daemon

import (
	"errors"
	"net"
	"sync"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

// rootReserve is how many of --max-conns only root may take (at most half
// of them): however many connections the users hold, the operator and the
// watchdog's own status check (alive, in sdnotify.go) still get in.
const rootReserve = 8

// errConnsFull refuses a connection past --max-conns, or past the part of
// it that users other than root may hold.
var errConnsFull = &codedError{code: api.CodeUnavailable, msg: "too many connections to gpuschedd; retry later", base: ErrUnavailable}

// connSet admits new connections and tracks the open ones, so that
// shutdown can close them: max in all, of which users other than root
// hold at most max less the root reserve, and each of them at most
// perUser (0: no share), counted by limits.Conns. A connection is
// admitted by its peer's uid before it is a net.Conn
// (netguard.Acceptor), then tracked.
type connSet struct {
	counts *limits.Conns
	mu     sync.Mutex
	m      map[net.Conn]uint32 // tracked connection → its peer's uid
}

func newConnSet(max, perUser int) *connSet {
	return &connSet{counts: limits.NewConns(max, rootReserve, perUser), m: map[net.Conn]uint32{}}
}

// admit counts a new connection of uid, or refuses it: an
// *limits.Exceeded naming --max-conns-per-user when uid holds its share
// (user gives its name for the message), else errConnsFull when the
// daemon or its users hold all they may.
func (s *connSet) admit(uid uint32, user func() string) error {
	err := s.counts.Admit(uid, user, "max-conns-per-user")
	if errors.Is(err, limits.ErrConnsFull) {
		return errConnsFull
	}
	return err
}

// track records c, admitted for uid, until remove.
func (s *connSet) track(c net.Conn, uid uint32) {
	s.mu.Lock()
	s.m[c] = uid
	s.mu.Unlock()
}

// release gives back an admission of uid's that was never tracked.
func (s *connSet) release(uid uint32) { s.counts.Release(uid) }

// remove forgets c and gives back its admission.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.m[c]
	if !ok {
		return
	}
	delete(s.m, c)
	s.counts.Release(uid)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		c.Close()
	}
}
