package daemon

import (
	"errors"
	"math"
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
	lines  *limits.Bytes // long request lines being gathered (lineReader); nil: no cap
	mu     sync.Mutex
	m      map[net.Conn]uint32 // tracked connection → its peer's uid
}

// newConnSet admits max connections, perUser of a user's, whose long
// request lines hold at most lineBytesPerUser of a user's at once (0: no
// cap): 256 connections of one user, each in the middle of a line of
// 1 MiB, held 256 MiB of the daemon's memory for the line timeout, and
// every user as much (a red-team pass, 2026-11-29).
func newConnSet(max, perUser int, lineBytesPerUser int64) *connSet {
	s := &connSet{counts: limits.NewConns(max, rootReserve, perUser), m: map[net.Conn]uint32{}}
	if lineBytesPerUser > 0 {
		s.lines = limits.NewBytes(math.MaxInt64, lineBytesPerUser)
	}
	return s
}

// longLine holds what one of uid's long request lines may take
// (api.MaxLineBytes), or refuses it with ErrBytesFull.
func (s *connSet) longLine(uid uint32) (release func(), err error) {
	if s.lines == nil {
		return func() {}, nil
	}
	return s.lines.Take(uid, api.MaxLineBytes)
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
