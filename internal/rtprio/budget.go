package rtprio

import "time"

// bucket holds the daemon's real-time CPU to Budget on average: it fills
// at Budget CPUs and holds at most one window's worth; what the daemon
// uses while at real time drains it, and it may run at real time only
// while the bucket is not empty. Over any interval T the daemon's CPU at
// real time is then at most Budget·T plus one window's worth plus what
// it used past empty before a check saw it.
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
// time or not, and says whether it may be at real time from now.
func (b *bucket) step(elapsed, cpu time.Duration, realtime bool) bool {
	b.level += time.Duration(b.budget * float64(elapsed))
	if realtime {
		b.level -= cpu
	}
	b.level = min(b.level, b.max)
	return b.level > 0
}

// full says the daemon used no more than its budget since the bucket was
// last full.
func (b *bucket) full() bool { return b.level == b.max }
