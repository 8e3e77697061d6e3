package limits

import (
	"errors"
	"sync"
)

// ErrBytesFull refuses bytes past a budget: all of it held, or the
// asker's share of it.
var ErrBytesFull = errors.New("too many bytes held")

// Bytes is a budget of bytes held at once (request bodies kept whole in
// memory): max in all, each uid at most perUser of it. Unlike Slots, a
// take over the budget is refused at once, not waited for.
type Bytes struct {
	mu      sync.Mutex
	held    int64
	byUID   map[uint32]int64
	max     int64
	perUser int64
}

// NewBytes is a budget of max bytes, perUser of them each uid's.
func NewBytes(max, perUser int64) *Bytes {
	return &Bytes{byUID: map[uint32]int64{}, max: max, perUser: perUser}
}

// Take holds n more bytes for uid, or refuses with ErrBytesFull; release
// gives them back.
func (b *Bytes) Take(uid uint32, n int64) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held+n > b.max || b.byUID[uid]+n > b.perUser {
		return nil, ErrBytesFull
	}
	b.held += n
	b.byUID[uid] += n
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.held -= n
			if b.byUID[uid] -= n; b.byUID[uid] == 0 {
				delete(b.byUID, uid)
			}
		})
	}, nil
}
