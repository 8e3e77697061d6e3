package placement

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestOrderTheSameInAnyInputOrder: a queue given in Seq order (sorted by
// counting on the effective priority) and the same queue shuffled (sorted
// by comparison) come out in the same order, for queues of narrow and of
// far-apart priorities, with and without shared Seqs, with and without
// what each owner was served already.
func TestOrderTheSameInAnyInputOrder(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(7, 11))
	for trial := range 400 {
		n := 1 + r.IntN(300)
		spread := []int{1, 4, 1000, math.MaxInt / 2}[trial%4]
		queue := make([]Job, n)
		for k := range queue {
			seq := uint64(k + 1)
			if trial%5 == 0 {
				seq = uint64(k/3 + 1) // shared Seqs: ID decides
			}
			queue[k] = Job{
				ID:       "j" + strconv.Itoa(r.IntN(1000000)),
				Owner:    "u" + strconv.Itoa(r.IntN(4)),
				Priority: r.IntN(spread) - spread/2,
				Seq:      seq,
				QueuedAt: now.Add(-time.Duration(r.IntN(600)) * time.Minute),
			}
		}
		var served map[string]Served
		if trial%2 == 1 {
			served = map[string]Served{}
			for o := range 4 {
				served["u"+strconv.Itoa(o)] = Served{Running: r.IntN(3), Last: now.Add(-time.Duration(r.IntN(3)) * time.Minute)}
			}
		}
		ids := func(js []*Job) []string {
			out := make([]string, len(js))
			for k, j := range js {
				out[k] = j.ID + "/" + strconv.FormatUint(j.Seq, 10)
			}
			return out
		}
		inSeq := ids(order(queue, served, now, 10*time.Minute))
		shuffled := slices.Clone(queue)
		r.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
		if got := ids(order(shuffled, served, now, 10*time.Minute)); !slices.Equal(got, inSeq) {
			t.Fatalf("trial %d (%d jobs, spread %d): in Seq order %v, shuffled %v", trial, n, spread, inSeq, got)
		}
	}
}
