package schedwait

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpusched/gpusched/internal/testutil/rank"
)

// Summary sums up the waits of one process's threads.
type Summary struct {
	Waits, Woken         int // Woken of Waits began at a wake-up
	Unrecorded           int // waits whose end the trace lacks (Wait.Unrecorded)
	P50, P99, Max, Total time.Duration
	Long                 int // waits of the long threshold or more
	LongTotal            time.Duration
	LongPreempted        int            // long waits that began at a preemption
	LongIdle             int            // long waits that began while a CPU was idle
	LongMoved            int            // long waits that ran on a CPU other than the one they were queued on
	LongUntilBlocked     int            // long waits that ended as the thread before them on their CPU blocked
	Behind               map[string]int // long waits by what ran on their CPU when they began
}

// Summarize sums up the waits of process tgid's threads; name says what a
// thread is (Name).
func (t *Trace) Summarize(tgid int, long time.Duration, name func(tid int) string) Summary {
	s := Summary{Behind: map[string]int{}}
	var all []time.Duration
	for _, w := range t.Waits {
		if t.Tgid[w.Tid] != tgid {
			continue
		}
		d := time.Duration(w.To - w.From)
		all = append(all, d)
		s.Total += d
		if w.Woken {
			s.Woken++
		}
		if w.Unrecorded {
			s.Unrecorded++
		}
		if d < long {
			continue
		}
		s.Long++
		s.LongTotal += d
		if !w.Woken {
			s.LongPreempted++
		}
		if w.IdleCPUs > 0 {
			s.LongIdle++
		}
		if w.Ran != w.Queued {
			s.LongMoved++
		}
		if w.BeforeBlocked && w.Before != 0 {
			s.LongUntilBlocked++
		}
		s.Behind[name(w.Behind)]++
	}
	s.Waits = len(all)
	if len(all) == 0 {
		return s
	}
	slices.Sort(all)
	s.P50, s.P99, s.Max = rank.Percentile(all, 50), rank.Percentile(all, 99), rank.Percentile(all, 100)
	return s
}

func (s Summary) String() string {
	if s.Waits == 0 {
		return "no waits"
	}
	behind := slices.SortedFunc(maps.Keys(s.Behind), func(a, b string) int {
		return cmp.Or(cmp.Compare(s.Behind[b], s.Behind[a]), cmp.Compare(a, b))
	})
	var top []string
	for i, n := range behind {
		if i == 5 {
			break
		}
		top = append(top, fmt.Sprintf("%s %d", n, s.Behind[n]))
	}
	return fmt.Sprintf("%d waits (%d woken, %d preempted; %d ended unrecorded), p50 %v p99 %v max %v, %v in all; %d long (%v): %d preempted, %d began while a CPU was idle, %d ran elsewhere than queued, %d ran once the thread before them blocked, queued behind %s",
		s.Waits, s.Woken, s.Waits-s.Woken, s.Unrecorded, s.P50, s.P99, s.Max, s.Total.Round(time.Microsecond),
		s.Long, s.LongTotal.Round(time.Microsecond), s.LongPreempted, s.LongIdle, s.LongMoved, s.LongUntilBlocked, strings.Join(top, ", "))
}

// Name says what thread tid is: the role its process has in roles
// (process id to role), else its name without a "/N" suffix ("swapper"
// for the idle thread).
func (t *Trace) Name(tid int, roles map[int]string) string {
	if tid == 0 {
		return "idle"
	}
	if r, ok := roles[t.Tgid[tid]]; ok {
		return r
	}
	c := t.Comm[tid]
	if i := strings.IndexByte(c, '/'); i > 0 {
		c = c[:i]
	}
	if c == "" {
		return fmt.Sprintf("thread %d", tid)
	}
	return c
}

// Of selects the waits of process tgid's threads.
func (t *Trace) Of(tgid int) func(Wait) bool {
	return func(w Wait) bool { return t.Tgid[w.Tid] == tgid }
}

// WokenBy selects the waits of process tgid's threads that a thread of
// process waker woke: a request's or a reply's wake-up.
func (t *Trace) WokenBy(tgid, waker int) func(Wait) bool {
	return func(w Wait) bool { return t.Tgid[w.Tid] == tgid && w.Waker != 0 && t.Tgid[w.Waker] == waker }
}

// Waiting is how much of [from, to] (CLOCK_MONOTONIC ns) at least one of
// the waits which selects covered.
func (t *Trace) Waiting(from, to int64, which func(Wait) bool) time.Duration {
	var spans [][2]int64
	for _, w := range t.Waits {
		if w.To > from && w.From < to && which(w) {
			spans = append(spans, [2]int64{max(w.From, from), min(w.To, to)})
		}
	}
	slices.SortFunc(spans, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
	var sum, end int64
	for _, s := range spans {
		if s[0] > end {
			end = s[0]
		}
		if s[1] > end {
			sum += s[1] - end
			end = s[1]
		}
	}
	return time.Duration(sum)
}
