package rtprio

import "time"

// bucket holds the daemon's real-time CPU to Budget on average: it fills
// at Budget CPUs and holds at most Budget·Window; what the daemon uses
// while at real time drains it. The daemon leaves real time when the
// bucket is empty and comes back when it is full again, at least Window
// later. Over any interval T the daemon's CPU at real time is then at most
// Budget·T plus a full bucket plus what it used past empty before a check
// saw it.
type bucket struct {
	budget float64       // CPUs
	max    time.Duration // CPU time the bucket holds when full
	level  time.Duration
}

func newBucket(budget float64, window time.Duration) *bucket {
	max := time.Duration(budget * float64(window))
	return &bucket{budget: budget, max: max, level: max}
}

// step accounts elapsed wall time in which the daemon used cpu, at real
// time or not.
func (b *bucket) step(elapsed, cpu time.Duration, realtime bool) {
	b.level += time.Duration(b.budget * float64(elapsed))
	if realtime {
		b.level -= cpu
	}
	b.level = min(b.level, b.max)
}

// admit says whether the daemon may be at real time from now, given
// whether it is: it stays until the bucket is empty, and is let back once
// the bucket is full.
func (b *bucket) admit(realtime bool) bool {
	if realtime {
		return b.level > 0
	}
	return b.level >= b.max
}

// untilFull is the wall time the bucket takes to fill, rounded up to the
// microsecond so that the wait is never a hair short.
func (b *bucket) untilFull() time.Duration {
	return time.Duration(float64(b.max-b.level)/b.budget).Truncate(time.Microsecond) + time.Microsecond
}
