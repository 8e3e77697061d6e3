package placement

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// ranked is a job with its place in the order.
type ranked struct {
	job   *Job
	eff   int // effective priority: base plus aging
	round int // its owner's k-th job at this effective priority
}

// order returns the queue in placement order: effective priority
// descending, then round-robin between owners (each owner's k-th job, in
// Seq order, goes in round k), then Seq. The input order does not matter.
func order(queue []Job, now time.Time, step time.Duration) []*Job {
	rs := make([]ranked, len(queue))
	for i := range queue {
		rs[i] = ranked{job: &queue[i], eff: effective(&queue[i], now, step)}
	}
	bySeq := func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.job.Seq, b.job.Seq), strings.Compare(a.job.ID, b.job.ID))
	}
	slices.SortFunc(rs, func(a, b ranked) int { return cmp.Or(cmp.Compare(b.eff, a.eff), bySeq(a, b)) })
	rounds := map[string]int{}
	for lo := 0; lo < len(rs); {
		hi := lo
		clear(rounds)
		for ; hi < len(rs) && rs[hi].eff == rs[lo].eff; hi++ {
			rs[hi].round = rounds[rs[hi].job.Owner]
			rounds[rs[hi].job.Owner]++
		}
		if len(rounds) > 1 {
			slices.SortStableFunc(rs[lo:hi], func(a, b ranked) int { return cmp.Compare(a.round, b.round) })
		}
		lo = hi
	}
	out := make([]*Job, len(rs))
	for i, r := range rs {
		out[i] = r.job
	}
	return out
}

// effective is j's priority raised by one per AgingStep waited (step 0:
// no aging).
func effective(j *Job, now time.Time, step time.Duration) int {
	if w := now.Sub(j.QueuedAt); step > 0 && w > 0 {
		return j.Priority + int(w/step)
	}
	return j.Priority
}
