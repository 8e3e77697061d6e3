package retention

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/gpusched/gpusched/internal/fairshare"
)

// Policy is how much finished history to keep. A zero field turns its
// limit off.
type Policy struct {
	Keep  int           // records kept per user, the newest
	For   time.Duration // how long after its end a record is kept
	Bytes int64         // what the records kept per user hold on disk together, the newest first
	// Together is what the records kept of all users hold on disk
	// together: past it each user keeps an equal share (fairshare.Level)
	// where that is below Bytes, the newest first, so that those who
	// hold the most lose their oldest first.
	Together int64
}

// Off reports whether the policy removes nothing.
func (p Policy) Off() bool { return p.Keep <= 0 && p.For <= 0 && p.Bytes <= 0 && p.Together <= 0 }

// bytes is what one user's records may hold: Bytes, or less where their
// share of Together is; math.MaxInt64 for no cap.
func (p Policy) bytes(share int64) int64 {
	limit := int64(math.MaxInt64)
	if p.Bytes > 0 {
		limit = p.Bytes
	}
	return min(limit, share)
}

// Item is one finished record.
type Item struct {
	UID   uint32    // its owner: the count is per user
	Ended time.Time // when it finished
	Bytes int64     // what it holds on disk (a process's logs)
}

// Select returns the indexes into items, ascending, of the records to drop
// at now: each user's beyond its Keep newest, or beyond the newest that
// hold Bytes together, and any that ended more than For ago. Records that
// ended at the same time are ordered as given, a later one newer. next is
// when the earliest kept record comes due for its age; zero when none
// will.
func Select(now time.Time, p Policy, items []Item) (drop []int, next time.Time) {
	if p.Off() {
		return nil, time.Time{}
	}
	byUser := map[uint32][]int{}
	for i, it := range items {
		byUser[it.UID] = append(byUser[it.UID], i)
	}
	gone := make([]bool, len(items))
	if p.Keep > 0 || p.Bytes > 0 || p.Together > 0 {
		for _, idx := range byUser {
			// Newest first; of equal ends, the later given.
			slices.SortFunc(idx, func(a, b int) int {
				if c := items[b].Ended.Compare(items[a].Ended); c != 0 {
					return c
				}
				return cmp.Compare(b, a)
			})
		}
		share := int64(math.MaxInt64)
		if p.Together > 0 {
			share = fairshare.Level(p.Together, keptBytes(p, items, byUser))
		}
		limit := p.bytes(share)
		for _, idx := range byUser {
			var held int64
			for n, i := range idx {
				held += items[i].Bytes
				gone[i] = p.Keep > 0 && n >= p.Keep || held > limit
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

// keptBytes is what each user's records that Keep and Bytes keep hold
// (byUser's lists newest first).
func keptBytes(p Policy, items []Item, byUser map[uint32][]int) []int64 {
	limit := p.bytes(math.MaxInt64)
	held := make([]int64, 0, len(byUser))
	for _, idx := range byUser {
		var kept int64
		for n, i := range idx {
			if p.Keep > 0 && n >= p.Keep || kept+items[i].Bytes > limit {
				break
			}
			kept += items[i].Bytes
		}
		held = append(held, kept)
	}
	return held
}
