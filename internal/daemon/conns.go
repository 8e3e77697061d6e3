package daemon

import (
	"net"
	"sync"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

// rootReserve is how many of --max-conns only root may take (at most half
// of them): however many connections the users hold, the operator and the
// watchdog's own status check (alive, in sdnotify.go) still get in.
const rootReserve = 8

// anyPeer stands, in a connSet, for a peer whose uid is not known (a
// metrics connection from another host): it has no share of its own, only
// the part of the cap that users other than root hold together.
const anyPeer = ^uint32(0)

// errConnsFull refuses a connection past --max-conns, or past the part of
// it that users other than root may hold.
var errConnsFull = &codedError{code: api.CodeUnavailable, msg: "too many connections to gpuschedd; retry later", base: ErrUnavailable}

// connSet admits new connections and tracks the open ones, so that
// shutdown can close them: max in all, of which users other than root
// hold at most max less the root reserve, and each of them at most
// perUser (0: no share). A connection is admitted by its peer's uid
// before it is a net.Conn (netguard.Acceptor), then tracked.
type connSet struct {
	mu      sync.Mutex
	m       map[net.Conn]uint32 // tracked connection → its peer's uid
	open    int                 // admitted and not yet removed or released
	byUID   map[uint32]int      // of open, each uid's
	max     int
	reserve int
	perUser int
}

func newConnSet(max, perUser int) *connSet {
	return &connSet{m: map[net.Conn]uint32{}, byUID: map[uint32]int{}, max: max, reserve: min(rootReserve, max/2), perUser: perUser}
}

// admit counts a new connection of uid, or refuses it: an
// *limits.Exceeded naming --max-conns-per-user when uid holds its share
// (user gives its name for the message), else errConnsFull when the
// daemon or its users hold all they may.
func (s *connSet) admit(uid uint32, user func() string) error {
	s.mu.Lock()
	held := s.byUID[uid]
	overShare := uid != limits.Root && uid != anyPeer && s.perUser > 0 && held >= s.perUser
	full := s.open >= s.max || uid != limits.Root && s.open-s.byUID[limits.Root] >= s.max-s.reserve
	if !overShare && !full {
		s.open++
		s.byUID[uid]++
	}
	s.mu.Unlock()
	switch {
	case overShare:
		return limits.Check(uid, user(), held, s.perUser, "max-conns-per-user", "connections open")
	case full:
		return errConnsFull
	}
	return nil
}

// track records c, admitted for uid, until remove.
func (s *connSet) track(c net.Conn, uid uint32) {
	s.mu.Lock()
	s.m[c] = uid
	s.mu.Unlock()
}

// release gives back an admission of uid's that was never tracked.
func (s *connSet) release(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(uid)
}

func (s *connSet) releaseLocked(uid uint32) {
	s.open--
	if s.byUID[uid]--; s.byUID[uid] == 0 {
		delete(s.byUID, uid)
	}
}

// remove forgets c and gives back its admission.
func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uid, ok := s.m[c]
	if !ok {
		return
	}
	delete(s.m, c)
	s.releaseLocked(uid)
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.m {
		c.Close()
	}
}
