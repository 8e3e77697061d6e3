package main

import (
	"math/rand/v2"
	"testing"
)

// TestLatenciesByNearestRank: a victim's percentiles are the nearest-rank
// ones, whatever order the calls came in, and an operation run no times
// (-runs 0) summarises to zeros instead of ending the victim.
func TestLatenciesByNearestRank(t *testing.T) {
	for _, tc := range []struct {
		n             int
		p50, p99, max float64
	}{
		{n: 1, p50: 1, p99: 1, max: 1},
		{n: 10, p50: 5, p99: 10, max: 10},
		{n: 100, p50: 50, p99: 99, max: 100},
		{n: 2000, p50: 1000, p99: 1980, max: 2000},
		{n: 2001, p50: 1001, p99: 1981, max: 2001},
	} {
		l := &latencies{name: "status"}
		for _, i := range rand.Perm(tc.n) {
			l.ms = append(l.ms, float64(i+1))
		}
		got := l.op()
		if got.N != tc.n || got.P50 != tc.p50 || got.P99 != tc.p99 || got.Max != tc.max {
			t.Errorf("%d calls: n %d p50 %v p99 %v max %v, want p50 %v p99 %v max %v", tc.n, got.N, got.P50, got.P99, got.Max, tc.p50, tc.p99, tc.max)
		}
	}
	if got := (&latencies{name: "run"}).op(); got.Op != "run" || got.N != 0 || got.P50 != 0 || got.P99 != 0 || got.Max != 0 {
		t.Errorf("no calls: %+v", got)
	}
}
