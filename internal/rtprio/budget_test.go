package rtprio

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBucket(t *testing.T) {
	const w = 50 * time.Millisecond
	for _, tc := range []struct {
		name   string
		budget float64
		cpu    []time.Duration // used in each window, starting at real time
		want   []bool          // real time allowed after each
	}{
		{"within", 0.5, []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 0}, []bool{true, true, true}},
		{"one window over, back after the debt is repaid", 0.5, []time.Duration{100 * time.Millisecond, 0, 0, 0, 0}, []bool{false, false, false, true, true}},
		{"use in the fair class is not counted", 0.5, []time.Duration{60 * time.Millisecond, 500 * time.Millisecond, 0}, []bool{false, true, true}},
		{"a small budget", 0.01, []time.Duration{time.Millisecond, 0, 0}, []bool{false, true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, realtime := newBucket(tc.budget, w), true
			for i, cpu := range tc.cpu {
				realtime = b.step(w, cpu, realtime)
				if realtime != tc.want[i] {
					t.Fatalf("window %d (%v used): real time %v, want %v (level %v)", i, cpu, realtime, tc.want[i], b.level)
				}
				if full := b.level == b.max; b.full() != full {
					t.Fatalf("window %d: full() %v at level %v of %v", i, b.full(), b.level, b.max)
				}
			}
		})
	}
}

// TestBucketHoldsTheAverage: whatever the daemon uses, checked at
// whatever times (the window's ticker, or the timer on the CPU clock), its
// CPU at real time up to any check is at most the budget's share of the
// time, one window's worth, and what it used since the check before.
func TestBucketHoldsTheAverage(t *testing.T) {
	const w = 50 * time.Millisecond
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		budget := 0.05 + r.Float64()*2
		b, realtime := newBucket(budget, w), true
		var used, last, elapsed time.Duration
		for range 400 {
			gap := time.Duration(r.Int64N(int64(20 * w)))
			elapsed += gap
			cpu := time.Duration(r.Int64N(int64(16*gap) + 1)) // up to 16 CPUs
			if r.IntN(2) == 0 {
				cpu /= 100
			}
			if realtime {
				used += cpu
				last = cpu
			}
			realtime = b.step(gap, cpu, realtime)
			if limit := time.Duration(budget*float64(elapsed)) + b.max + last; used > limit {
				t.Fatalf("budget %.2f, after %v: %v at real time, over %v", budget, elapsed, used, limit)
			}
		}
	}
}
