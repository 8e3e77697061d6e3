package fairshare

import (
	"math"
	"slices"
	"testing"
)

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		total int64
		held  []int64
		want  int64
	}{
		{"no one", 100, nil, math.MaxInt64},
		{"within", 100, []int64{30, 70}, math.MaxInt64},
		{"one alone over", 100, []int64{150}, 100},
		{"the largest cut, the others kept", 100, []int64{10, 20, 90}, 70},
		{"two over, cut alike", 100, []int64{10, 60, 90}, 45},
		{"equal shares when all are over", 90, []int64{50, 60, 70}, 30},
		{"a share rounds down", 100, []int64{40, 40, 40}, 33},
		{"nothing to share", 0, []int64{1, 2}, 0},
	} {
		got := Level(tc.total, tc.held)
		if got != tc.want {
			t.Errorf("%s: Level(%d, %v) = %d, want %d", tc.name, tc.total, tc.held, got, tc.want)
		}
		if got == math.MaxInt64 {
			continue
		}
		var kept int64
		for _, h := range tc.held {
			kept += min(h, got)
		}
		if kept > tc.total || kept+int64(len(tc.held)) <= tc.total && slices.Max(tc.held) > got {
			t.Errorf("%s: at level %d they keep %d of %d", tc.name, got, kept, tc.total)
		}
	}
}
