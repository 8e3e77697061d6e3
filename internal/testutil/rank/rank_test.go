package rank

import (
	"testing"
	"time"
)

// TestPercentileNearestRank: the sample at rank ceil(pct/100 x n), the
// first at 0 and the last at 100, for any length.
func TestPercentileNearestRank(t *testing.T) {
	count := func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = i + 1
		}
		return s
	}
	for _, tc := range []struct{ n, pct, want int }{
		{1, 0, 1}, {1, 50, 1}, {1, 99, 1}, {1, 100, 1},
		{10, 0, 1}, {10, 50, 5}, {10, 99, 10}, {10, 100, 10},
		{100, 50, 50}, {100, 99, 99},
		{2000, 50, 1000}, {2000, 99, 1980}, {2000, 100, 2000},
		{2001, 50, 1001}, {2001, 99, 1981},
	} {
		if got := Percentile(count(tc.n), tc.pct); got != tc.want {
			t.Errorf("p%d of 1..%d: %d, want %d", tc.pct, tc.n, got, tc.want)
		}
	}
	if got := Percentile([]time.Duration(nil), 99); got != 0 {
		t.Errorf("p99 of nothing: %v", got)
	}
}
