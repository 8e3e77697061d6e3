package retention

import (
	"cmp"
	"slices"
	"time"
)

// Policy is how much finished history to keep. A zero field turns its
// limit off.
type Policy struct {
	Keep int           // records kept per user, the newest
	For  time.Duration // how long after its end a record is kept
}

// Off reports whether the policy removes nothing.
func (p Policy) Off() bool { return p.Keep <= 0 && p.For <= 0 }

// Item is one finished record.
type Item struct {
	UID   uint32    // its owner: the count is per user
	Ended time.Time // when it finished
}

// Select returns the indexes into items, ascending, of the records to drop
// at now: each user's beyond its Keep newest, and any that ended more than
// For ago. Records that ended at the same time are ordered as given, a
// later one newer. next is when the earliest kept record comes due for its
// age; zero when none will.
func Select(now time.Time, p Policy, items []Item) (drop []int, next time.Time) {
	if p.Off() {
		return nil, time.Time{}
	}
	byUser := map[uint32][]int{}
	for i, it := range items {
		byUser[it.UID] = append(byUser[it.UID], i)
	}
	gone := make([]bool, len(items))
	if p.Keep > 0 {
		for _, idx := range byUser {
			if len(idx) <= p.Keep {
				continue
			}
			// Newest first; of equal ends, the later given.
			slices.SortFunc(idx, func(a, b int) int {
				if c := items[b].Ended.Compare(items[a].Ended); c != 0 {
					return c
				}
				return cmp.Compare(b, a)
			})
			for _, i := range idx[p.Keep:] {
				gone[i] = true
			}
		}
	}
	for i, it := range items {
		if gone[i] || p.For <= 0 {
			continue
		}
		due := it.Ended.Add(p.For)
		if !due.After(now) {
			gone[i] = true
		} else if next.IsZero() || due.Before(next) {
			next = due
		}
	}
	for i, g := range gone {
		if g {
			drop = append(drop, i)
		}
	}
	return drop, next
}
