package limits

import (
	"errors"
	"sync"
)

// AnyPeer stands for a connection's peer whose uid is not known (a TCP
// peer on another host): it has no share of its own, only the part of the
// cap that users other than root hold together.
const AnyPeer = ^uint32(0)

// ErrConnsFull refuses a connection past a listener's cap, or past the
// part of it users other than root may hold.
var ErrConnsFull = errors.New("too many connections")

// Conns counts the connections a listener holds open by the uid of their
// peer: max in all, of which users other than root hold at most max less
// reserve, and each of them at most perUser (0: no share).
type Conns struct {
	mu      sync.Mutex
	open    int
	byUID   map[uint32]int
	max     int
	reserve int
	perUser int
}

// NewConns counts up to max connections, reserve of them root's alone
// (at most half), perUser each user's.
func NewConns(max, reserve, perUser int) *Conns {
	return &Conns{byUID: map[uint32]int{}, max: max, reserve: min(reserve, max/2), perUser: perUser}
}

// Admit counts a new connection of uid, or refuses it: an *Exceeded
// naming flag when uid holds its share (user gives its name for the
// message), else ErrConnsFull when all that may be held is.
func (c *Conns) Admit(uid uint32, user func() string, flag string) error {
	c.mu.Lock()
	held := c.byUID[uid]
	overShare := uid != Root && uid != AnyPeer && c.perUser > 0 && held >= c.perUser
	full := c.open >= c.max || uid != Root && c.open-c.byUID[Root] >= c.max-c.reserve
	if !overShare && !full {
		c.open++
		c.byUID[uid]++
	}
	c.mu.Unlock()
	switch {
	case overShare:
		return Check(uid, user(), held, c.perUser, flag, "connections open")
	case full:
		return ErrConnsFull
	}
	return nil
}

// Release gives back an admission of uid's.
func (c *Conns) Release(uid uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.byUID[uid]--; c.byUID[uid] == 0 {
		delete(c.byUID, uid)
	}
}

// Held is how many connections uid holds.
func (c *Conns) Held(uid uint32) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byUID[uid]
}
