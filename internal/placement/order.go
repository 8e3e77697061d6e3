package placement

import (
	"cmp"
	"slices"
	"time"
)

// ranked is a queued job's place in the order; it holds no pointer, for
// cheap sorting.
type ranked struct {
	eff   int // effective priority: base plus aging
	round int // its owner's running requests plus k, for its k-th job at this effective priority
	seq   uint64
	i     int // position in the queue
	owner int // interned Owner
}

// order returns the queue in placement order: effective priority
// descending, then round-robin between owners (each owner's k-th job, in
// Seq order, goes in round k plus the owner's running requests; within a
// round the owner started least recently first), then Seq (then ID,
// should two share a Seq). The input order does not matter.
func order(queue []Job, served map[string]Served, now time.Time, step time.Duration) []*Job {
	rs := make([]ranked, len(queue))
	owners := map[string]int{}
	var names []string
	for i := range queue {
		o, ok := owners[queue[i].Owner]
		if !ok {
			o = len(owners)
			owners[queue[i].Owner] = o
			names = append(names, queue[i].Owner)
		}
		rs[i] = ranked{eff: effective(&queue[i], now, step), seq: queue[i].Seq, i: i, owner: o}
	}
	sortRanked(rs, queue)
	first := make([]int, len(owners)) // per owner: its running requests, its first round
	for o, name := range names {
		first[o] = max(served[name].Running, 0)
	}
	rounds := slices.Clone(first) // per owner, in the current group
	var tmp []ranked
	for lo, hi := 0, 0; lo < len(rs); lo = hi {
		last := 0
		for hi = lo; hi < len(rs) && rs[hi].eff == rs[lo].eff; hi++ {
			rs[hi].round = rounds[rs[hi].owner]
			rounds[rs[hi].owner]++
			last = max(last, rs[hi].round)
		}
		for _, r := range rs[lo:hi] {
			rounds[r.owner] = first[r.owner]
		}
		tmp = byRound(rs[lo:hi], last, tmp)
		leastRecentFirst(rs[lo:hi], names, served)
	}
	out := make([]*Job, len(rs))
	for k, r := range rs {
		out[k] = &queue[r.i]
	}
	return out
}

// leastRecentFirst orders each round of rs (sorted by round, then Seq) by
// when its owner was last started, least recently (or never) first,
// keeping Seq order between owners started at the same time.
func leastRecentFirst(rs []ranked, names []string, served map[string]Served) {
	if len(served) == 0 {
		return
	}
	last := make([]time.Time, len(names))
	for o, name := range names {
		last[o] = served[name].Last
	}
	for lo, hi := 0, 0; lo < len(rs); lo = hi {
		for hi = lo + 1; hi < len(rs) && rs[hi].round == rs[lo].round; hi++ {
		}
		if hi-lo > 1 {
			slices.SortStableFunc(rs[lo:hi], func(a, b ranked) int { return last[a.owner].Compare(last[b.owner]) })
		}
	}
}

// sortRanked sorts rs by effective priority, descending, then Seq, then
// ID. A queue given in Seq order, as the daemon's is, with effective
// priorities within a few times its length of each other, is sorted by a
// stable counting sort on the priority alone, in linear time: the
// comparison sort was two thirds of a pass over 10,000 queued jobs.
func sortRanked(rs []ranked, queue []Job) {
	if lo, hi, ok := seqOrdered(rs); ok && uint64(hi)-uint64(lo) <= uint64(4*len(rs)+64) {
		byEff(rs, lo, hi)
		return
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if c := cmp.Compare(b.eff, a.eff); c != 0 {
			return c
		}
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return cmp.Compare(queue[a.i].ID, queue[b.i].ID)
	})
}

// seqOrdered reports whether rs is in strictly ascending Seq order (no two
// share a Seq, so no ID decides), and its least and greatest effective
// priorities.
func seqOrdered(rs []ranked) (lo, hi int, ok bool) {
	if len(rs) == 0 {
		return 0, 0, false
	}
	lo, hi = rs[0].eff, rs[0].eff
	for k := 1; k < len(rs); k++ {
		if rs[k].seq <= rs[k-1].seq {
			return 0, 0, false
		}
		lo, hi = min(lo, rs[k].eff), max(hi, rs[k].eff)
	}
	return lo, hi, true
}

// byEff sorts rs, whose effective priorities lie in [lo, hi], by effective
// priority, descending, keeping their order within each: a counting sort.
func byEff(rs []ranked, lo, hi int) {
	start := make([]int, hi-lo+2)
	for _, r := range rs {
		start[hi-r.eff+1]++
	}
	for k := 1; k < len(start); k++ {
		start[k] += start[k-1]
	}
	for _, r := range slices.Clone(rs) {
		rs[start[hi-r.eff]] = r
		start[hi-r.eff]++
	}
}

// byRound sorts rs, in Seq order, by round (at most last), keeping Seq
// order within a round: a counting sort through tmp, which it returns for
// reuse.
func byRound(rs []ranked, last int, tmp []ranked) []ranked {
	if last == 0 {
		return tmp
	}
	start := make([]int, last+2)
	for _, r := range rs {
		start[r.round+1]++
	}
	for k := 1; k < len(start); k++ {
		start[k] += start[k-1]
	}
	tmp = append(tmp[:0], rs...)
	for _, r := range tmp {
		rs[start[r.round]] = r
		start[r.round]++
	}
	return tmp
}

// effective is j's priority raised by one per AgingStep waited (step 0:
// no aging).
func effective(j *Job, now time.Time, step time.Duration) int {
	if w := now.Sub(j.QueuedAt); step > 0 && w > 0 {
		return j.Priority + int(w/step)
	}
	return j.Priority
}
