package daemon

import (
	"cmp"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil/schedwait"
)

var fairnessSched = flag.Bool("fairness.sched", false, "BenchmarkFairness: record the kernel's scheduler (tracefs) during each run of the victim, and say how long the daemon's and the victim's threads waited for a CPU, and behind what")

// schedBufferKiB is the ring buffer per CPU of a recording: about 350,000
// events a CPU, several seconds of a flood.
const schedBufferKiB = 32 << 10

// schedLongWait is the wait for a CPU a summary looks into.
const schedLongWait = 500 * time.Microsecond

// startSchedRecording starts recording the scheduler when -fairness.sched
// asks for it (nil otherwise).
func startSchedRecording(b *testing.B) *schedwait.Recording {
	if !*fairnessSched {
		return nil
	}
	if err := schedwait.Mount(schedwait.Tracefs); err != nil {
		b.Fatal(err)
	}
	r, err := schedwait.Start(schedwait.Tracefs, schedBufferKiB)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	return r
}

// logSchedWaits stops rec and logs, for the daemon's and the victim's
// threads (roles: process id to role), their waits for a CPU in the
// victim's run (phase), and how much of the slowest 1% of its status
// calls (times, CLOCK_MONOTONIC ns) was spent waiting: by the daemon's
// thread the victim's request woke, by the victim's thread the daemon's
// reply woke, by a thread either runtime woke for itself (handing work
// on), by any thread of either.
func logSchedWaits(b *testing.B, rec *schedwait.Recording, phase string, roles map[int]string, times [][2]int64) {
	b.Helper()
	tr, err := rec.Stop(func(comm string) bool { return comm == "gpuschedd" || comm == "fairload" })
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("kernel, %s: %.1f s on %d CPUs, %d events, %d lost", phase, float64(tr.End-tr.Start)/1e9, tr.CPUs, tr.Events, tr.Lost)
	name := func(tid int) string { return tr.Name(tid, roles) }
	ids := map[string]int{}
	for pid, role := range roles {
		ids[role] = pid
	}
	for _, role := range []string{"gpuschedd", "victim"} {
		b.Logf("  %s's threads: %v", role, tr.Summarize(ids[role], schedLongWait, name))
	}
	slow := slices.Clone(times)
	slices.SortFunc(slow, func(x, y [2]int64) int { return cmp.Compare(y[1]-y[0], x[1]-x[0]) })
	slow = slow[:len(slow)/100]
	if len(slow) == 0 {
		return
	}
	d, v := ids["gpuschedd"], ids["victim"]
	which := []func(schedwait.Wait) bool{tr.WokenBy(d, v), tr.WokenBy(v, d), tr.WokenBy(d, d), tr.WokenBy(v, v), tr.Of(d), tr.Of(v)}
	var took time.Duration
	waited := make([]time.Duration, len(which))
	for _, c := range slow {
		took += time.Duration(c[1] - c[0])
		for i, w := range which {
			waited[i] += tr.Waiting(c[0], c[1], w)
		}
	}
	each := func(sum time.Duration) time.Duration { return (sum / time.Duration(len(slow))).Round(time.Microsecond) }
	b.Logf("  the slowest 1%% of the victim's status calls (%d): %v each; of it, waiting for a CPU: a daemon thread the victim woke (the request) %v, a victim thread the daemon woke (the reply) %v, a daemon thread the daemon woke %v, a victim thread the victim woke %v; any daemon thread %v, any victim thread %v",
		len(slow), each(took), each(waited[0]), each(waited[1]), each(waited[2]), each(waited[3]), each(waited[4]), each(waited[5]))
}
