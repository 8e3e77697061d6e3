// Package rank gives the benchmarks one definition of a percentile: the
// nearest rank, so that a p99 here means what it means anywhere else.
package rank

import "cmp"

// Percentile is the pct-th percentile (0 to 100) of sorted by nearest
// rank: the smallest sample at least pct percent of them do not exceed
// (p99 of 2,000 is the 1,980th). It is the zero value when sorted is empty.
func Percentile[T cmp.Ordered](sorted []T, pct int) T {
	if len(sorted) == 0 {
		var zero T
		return zero
	}
	return sorted[min(len(sorted), max(1, (pct*len(sorted)+99)/100))-1]
}
