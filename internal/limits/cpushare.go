package limits

import (
	"context"
	"math"
	"sync"
	"time"
)

// Daemon is the uid the daemon's own bulk work (a placement pass) is
// admitted under: (uid_t)-1, which no user has. Like Root it is never held
// to a CPU share.
const Daemon = math.MaxUint32

// CPUShareBurst is how long a user's average use of their CPU share may be
// spent at once: a user idle that long may take that much CPU in one go
// before waiting.
const CPUShareBurst = 2 * time.Second

// CPUShare holds each non-root user's bulk work in the daemon (every line
// of a log, a long listing) to a share of one CPU on average, as a token
// bucket of CPU time: the work is charged what it took, and a user who owes
// more than CPUShareBurst of their share waits, before their next piece of
// work starts, until they owe no more than that. So one user's stream of
// costly calls leaves the daemon idle most of the time for the others,
// however many connections it comes from. Root and the daemon never wait.
type CPUShare struct {
	rate  float64       // CPU seconds per second; 0: off
	burst time.Duration // debt a user may run up before waiting
	now   func() time.Time
	after func(time.Duration) <-chan time.Time

	mu   sync.Mutex
	owed map[uint32]*account
}

type account struct {
	owed time.Duration // CPU time used beyond the share, as of at
	at   time.Time
}

// NewCPUShare holds each non-root user to share of one CPU (0: no limit).
func NewCPUShare(share float64) *CPUShare {
	return &CPUShare{
		rate:  share,
		burst: time.Duration(share * float64(CPUShareBurst)),
		now:   time.Now,
		after: time.After,
		owed:  map[uint32]*account{},
	}
}

// Wait returns once uid owes no more than the burst, or with ctx's error
// when ctx ends first.
func (s *CPUShare) Wait(ctx context.Context, uid uint32) error {
	if s.exempt(uid) {
		return nil
	}
	for {
		s.mu.Lock()
		a := s.settle(uid)
		over := a.owed - s.burst
		if a.owed == 0 {
			delete(s.owed, uid) // kept only while owed
		}
		s.mu.Unlock()
		if over <= 0 {
			return nil
		}
		select {
		case <-s.after(payOff(over, s.rate)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxWait bounds one wait of Wait, which then looks again.
const maxWait = time.Minute

// payOff is how long paying off debt at rate takes, at most maxWait.
func payOff(debt time.Duration, rate float64) time.Duration {
	if secs := debt.Seconds() / rate; secs < maxWait.Seconds() {
		return time.Duration(secs * float64(time.Second))
	}
	return maxWait
}

// Within reports whether uid owes no more than the burst: whether Wait
// would return at once.
func (s *CPUShare) Within(uid uint32) bool {
	if s.exempt(uid) {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settle(uid).owed <= s.burst
}

// Charge counts cpu of uid's work against their share.
func (s *CPUShare) Charge(uid uint32, cpu time.Duration) {
	if s.exempt(uid) || cpu <= 0 {
		return
	}
	s.mu.Lock()
	s.settle(uid).owed += cpu
	s.mu.Unlock()
}

func (s *CPUShare) exempt(uid uint32) bool { return s.rate <= 0 || uid == Root || uid == Daemon }

// settle pays off uid's debt for the time since it was last settled and
// returns uid's account. Under mu.
func (s *CPUShare) settle(uid uint32) *account {
	now := s.now()
	a := s.owed[uid]
	if a == nil {
		a = &account{at: now}
		s.owed[uid] = a
	}
	a.owed -= time.Duration(s.rate * float64(now.Sub(a.at)))
	a.at = now
	a.owed = max(a.owed, 0)
	return a
}
