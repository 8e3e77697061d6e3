package backoff

import "time"

// Streak is one key's run of consecutive failures.
type Streak struct {
	Failures int       // consecutive failures; 1 on the failure that starts a streak
	Since    time.Time // when the first of them happened
	Next     time.Time // no try before this
}

// Set holds the failure streaks of keys K, each tied to the subject S (what
// the action acted on, such as a record's state) it failed on. It is not
// safe for concurrent use: its owner is one loop.
type Set[K, S comparable] struct {
	min, max time.Duration
	streaks  map[K]entry[S]
}

type entry[S comparable] struct {
	subject S
	Streak
}

// New returns an empty Set whose waits start at min (> 0) and double up
// to max.
func New[K, S comparable](min, max time.Duration) *Set[K, S] {
	return &Set[K, S]{min: min, max: max, streaks: map[K]entry[S]{}}
}

// Ready reports whether k may be tried on subject s at now: when it has no
// streak, when its streak was on another subject (which ends the streak),
// or when the streak's wait is over.
func (b *Set[K, S]) Ready(k K, s S, now time.Time) bool {
	e, ok := b.streaks[k]
	if !ok {
		return true
	}
	if e.subject != s {
		delete(b.streaks, k)
		return true
	}
	return !now.Before(e.Next)
}

// Fail records that k failed on subject s at now and returns its streak:
// Failures is 1 when this failure starts one (a streak on another subject
// ends first). The wait before the next try is min, doubled for each
// earlier failure of the streak, at most max.
func (b *Set[K, S]) Fail(k K, s S, now time.Time) Streak {
	e, ok := b.streaks[k]
	if !ok || e.subject != s {
		e = entry[S]{subject: s, Streak: Streak{Since: now}}
	}
	wait := b.min
	for i := 0; i < e.Failures && wait < b.max; i++ {
		wait *= 2
	}
	e.Failures++
	e.Next = now.Add(min(wait, b.max))
	b.streaks[k] = e
	return e.Streak
}

// Succeed ends k's streak and returns it (zero when there was none).
func (b *Set[K, S]) Succeed(k K) Streak {
	e := b.streaks[k]
	delete(b.streaks, k)
	return e.Streak
}

// Retain ends the streaks for which keep, given the key and the subject the
// streak is on, returns false: keys that are gone, subjects that changed.
func (b *Set[K, S]) Retain(keep func(K, S) bool) {
	for k, e := range b.streaks {
		if !keep(k, e.subject) {
			delete(b.streaks, k)
		}
	}
}
