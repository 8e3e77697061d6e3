// Package ramtier decides, for the host RAM tier (the GPU memory frozen
// processes park in host RAM, held to --ram-budget), how much of it each
// user may hold and which frozen processes eviction hibernates first to
// make room. Pure: the daemon hands it what is parked and evicts.
package ramtier

import (
	"slices"
	"time"

	"github.com/gpusched/gpusched/internal/fairshare"
	"github.com/gpusched/gpusched/internal/limits"
)

// Parked is one process whose GPU memory is in host RAM.
type Parked struct {
	Owner    uint32
	MiB      uint64
	Priority int
	FrozenAt time.Time
	// Evictable: frozen (not on its way in or out), not pinned, and not
	// already tried by this eviction.
	Evictable bool
}

// Share is the MiB of budget that uid's frozen processes may hold: the
// fraction of it, at least 1; 0 (no cap) for root, without a budget or
// with fraction 0.
func Share(uid uint32, budget uint64, fraction float64) uint64 {
	if uid == limits.Root || budget == 0 || fraction <= 0 {
		return 0
	}
	return max(1, uint64(fraction*float64(budget)))
}

// OverShare reports whether need more MiB take a user past their share,
// where their processes hold mine of the held all processes hold (the
// freezing one's aside). The share binds only beside other users'
// processes (held > mine): a user alone in the tier may use all of the
// budget, and the level (Order) takes the excess first once others need
// room.
func OverShare(share, held, mine, need uint64) bool {
	return share > 0 && held > mine && mine+need > share
}

// Held is what uid's processes of parked hold.
func Held(parked []Parked, uid uint32) uint64 {
	return sum(parked, func(p Parked) bool { return p.Owner == uid })
}

// Total is what all of parked hold.
func Total(parked []Parked) uint64 { return sum(parked, func(Parked) bool { return true }) }

// Room is what eviction could free: the MiB of uid's evictable processes,
// and of all the evictable ones.
func Room(parked []Parked, uid uint32) (own, all uint64) {
	return sum(parked, func(p Parked) bool { return p.Evictable && p.Owner == uid }), sum(parked, func(p Parked) bool { return p.Evictable })
}

// Own is the indices of uid's evictable processes in policy order:
// lowest priority first, then least recently frozen.
func Own(parked []Parked, uid uint32) []int {
	var out []int
	for i, p := range parked {
		if p.Evictable && p.Owner == uid {
			out = append(out, i)
		}
	}
	return byPolicy(parked, out)
}

// Order is the indices of the evictable processes of parked in the order
// eviction hibernates them to make room for owner's freeze of need more
// MiB within budget. First come those of the users over their level, the
// most each may keep so that every non-root user's processes, owner's need
// counted, fit what root's leave of the budget (fairshare.Level): one user
// who holds the tier cannot have another's few go first by setting their
// own priority higher. Then the rest. Each part is in policy order. Root,
// the operator, is never over a level: its processes go by policy alone.
func Order(parked []Parked, budget uint64, owner uint32, need uint64) []int {
	held := map[uint32]uint64{}
	var root uint64
	for _, p := range parked {
		if p.Owner == limits.Root {
			root += p.MiB
		} else {
			held[p.Owner] += p.MiB
		}
	}
	if owner == limits.Root {
		root += need
	} else {
		held[owner] += need
	}
	var amounts []int64
	for _, h := range held {
		amounts = append(amounts, int64(h))
	}
	level := fairshare.Level(int64(budget-min(budget, root)), amounts)
	var over, rest []int
	for i, p := range parked {
		switch {
		case !p.Evictable:
		case p.Owner != limits.Root && int64(held[p.Owner]) > level:
			over = append(over, i)
		default:
			rest = append(rest, i)
		}
	}
	return append(byPolicy(parked, over), byPolicy(parked, rest)...)
}

func byPolicy(parked []Parked, idx []int) []int {
	slices.SortStableFunc(idx, func(i, j int) int {
		a, b := parked[i], parked[j]
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		return a.FrozenAt.Compare(b.FrozenAt)
	})
	return idx
}

func sum(parked []Parked, with func(Parked) bool) uint64 {
	var s uint64
	for _, p := range parked {
		if with(p) {
			s += p.MiB
		}
	}
	return s
}
