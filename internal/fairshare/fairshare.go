// Package fairshare divides one capacity among holders by max-min
// fairness: those who hold the most are cut first, to equal shares, and
// those below the share not at all. Pure.
package fairshare

import (
	"math"
	"slices"
)

// Level is the most each holder may keep so that all of held together
// come to at most total: math.MaxInt64 when they are within it.
func Level(total int64, held []int64) int64 {
	sorted := slices.Sorted(slices.Values(held))
	left := total
	for i, h := range sorted {
		if share := left / int64(len(sorted)-i); h > share {
			return share
		}
		left -= h
	}
	return math.MaxInt64
}
