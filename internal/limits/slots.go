package limits

import "sync"

// Slots counts what each user holds at once of one kind (connections,
// streams) and refuses a user at its cap. The zero value is not usable:
// build one with NewSlots.
type Slots struct {
	mu   sync.Mutex
	held map[uint32]int
	max  int
	flag string
	what string
}

// NewSlots caps each non-root user at max slots (0: no cap); flag and what
// name the cap in refusals ("max-streams-per-user", "streams open").
func NewSlots(max int, flag, what string) *Slots {
	return &Slots{held: map[uint32]int{}, max: max, flag: flag, what: what}
}

// Take gives uid one slot and the function that hands it back (once), or
// an *Exceeded when uid holds its cap already.
func (s *Slots) Take(uid uint32, user string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := Check(uid, user, s.held[uid], s.max, s.flag, s.what); err != nil {
		return nil, err
	}
	s.held[uid]++
	var once sync.Once
	return func() { once.Do(func() { s.put(uid) }) }, nil
}

func (s *Slots) put(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[uid]--; s.held[uid] <= 0 {
		delete(s.held, uid)
	}
}

// Held is how many slots uid holds.
func (s *Slots) Held(uid uint32) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[uid]
}
