package daemon

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/placement"
	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

// benchJob is one job of the dispatch benchmark's mix.
type benchJob struct {
	name string
	gib  uint64
	dur  time.Duration
}

// dispatchMix is 40 jobs of 6, 12 and 20 GiB running 1.0 to 3.0 s each, in
// a fixed pseudo-random order.
func dispatchMix() []benchJob {
	sizes := []uint64{6, 12, 20}
	out := make([]benchJob, 40)
	x := uint32(12345)
	for i := range out {
		x = x*1103515245 + 12345
		out[i] = benchJob{name: fmt.Sprintf("b%02d", i), gib: sizes[(x>>16)%3], dur: time.Duration(1000+(x>>8)%2001) * time.Millisecond}
	}
	return out
}

// BenchmarkDispatch runs the 40-job mix on two simulated 24 GiB GPUs and
// reports the mean time from a job's exit to the next start on that GPU
// (target < 50 ms) and the makespan against the zero-latency ideal that
// the same placement rules give (target within 5%).
func BenchmarkDispatch(b *testing.B) {
	for range b.N {
		h := newQueueHarness(b, "2x24G")
		mix := dispatchMix()
		specs := make([]api.JobSpec, len(mix))
		for i, j := range mix {
			specs[i] = api.JobSpec{Name: j.name, Dir: "/", VRAM: api.VRAM{MiB: j.gib << 10},
				Cmd: h.simjob("--vram", strconv.FormatUint(j.gib<<10, 10), "--hold", fmt.Sprint(j.dur.Seconds()))}
		}
		t0 := time.Now()
		if _, err := h.client().Submit(ctxT(b), api.SubmitParams{Jobs: specs}); err != nil {
			b.Fatal(err)
		}
		type span struct {
			gpu        string
			start, end time.Time
		}
		spans := make([]span, len(mix))
		for i, j := range mix {
			done := h.waitJob(j.name)
			if done.State != api.JobDone {
				b.Fatalf("%s: %s %q", j.name, done.State, done.Reason)
			}
			p := h.proc(j.name)
			spans[i] = span{gpu: done.Attempts[0].GPUs[0], start: p.StartedAt, end: p.ExitedAt}
		}
		var last time.Time
		var gaps []time.Duration
		for _, s := range spans {
			if s.end.After(last) {
				last = s.end
			}
			var prev time.Time
			for _, o := range spans {
				if o.gpu == s.gpu && !o.end.After(s.start) && o.end.After(prev) {
					prev = o.end
				}
			}
			if !prev.IsZero() {
				gaps = append(gaps, s.start.Sub(prev))
			}
		}
		var sum time.Duration
		for _, g := range gaps {
			sum += g
		}
		slices.Sort(gaps)
		mean := sum / time.Duration(max(len(gaps), 1))
		makespan := last.Sub(t0)
		ideal := idealMakespan(mix, h.cfg.JobMarginMiB)
		b.ReportMetric(float64(mean.Microseconds())/1000, "ms-exit-to-start")
		b.ReportMetric(makespan.Seconds()/ideal.Seconds(), "makespan/ideal")
		b.Logf("40 jobs on 2x24G: exit->next start on that GPU mean %.1f ms, median %.1f ms, max %.1f ms over %d starts (target < 50 ms); makespan %.2f s, zero-latency ideal %.2f s: %.3fx (target <= 1.05)",
			float64(mean.Microseconds())/1000, float64(rank.Percentile(gaps, 50).Microseconds())/1000, float64(rank.Percentile(gaps, 100).Microseconds())/1000,
			len(gaps), makespan.Seconds(), ideal.Seconds(), makespan.Seconds()/ideal.Seconds())
		h.killAll()
	}
}

// idealMakespan simulates the mix under the same placement function with
// no latency at all: every job starts the instant placement allows and
// ends exactly its duration later.
func idealMakespan(mix []benchJob, margin uint64) time.Duration {
	opts := placement.DefaultOptions()
	opts.MarginMiB = margin
	type running struct {
		job  benchJob
		gpu  string
		ends time.Duration
	}
	var now time.Duration
	var run []running
	queued := map[string]benchJob{}
	for _, j := range mix {
		queued[j.name] = j
	}
	epoch := time.Unix(0, 0)
	for len(queued) > 0 || len(run) > 0 {
		gpus := []placement.GPU{{Index: 0, UUID: "g0", TotalMiB: 24 << 10}, {Index: 1, UUID: "g1", TotalMiB: 24 << 10}}
		for _, r := range run {
			g := &gpus[map[string]int{"g0": 0, "g1": 1}[r.gpu]]
			g.Occupants = append(g.Occupants, placement.Occupant{Kind: placement.Managed, ID: r.job.name, DeclaredMiB: r.job.gib << 10, UsedMiB: r.job.gib << 10, PeakMiB: r.job.gib << 10})
			g.UsedMiB += r.job.gib << 10
		}
		var q []placement.Job
		for i, j := range mix {
			if _, ok := queued[j.name]; ok {
				q = append(q, placement.Job{ID: j.name, Owner: "u", Seq: uint64(i + 1), QueuedAt: epoch, GPUs: 1, VRAMMiB: j.gib << 10})
			}
		}
		plan := placement.Place(placement.Snapshot{Now: epoch.Add(now), GPUs: gpus, Options: opts}, q)
		for _, s := range plan.Starts {
			run = append(run, running{job: queued[s.JobID], gpu: s.GPUs[0], ends: now + queued[s.JobID].dur})
			delete(queued, s.JobID)
		}
		if len(run) == 0 {
			break
		}
		sort.Slice(run, func(i, j int) bool { return run[i].ends < run[j].ends })
		now = run[0].ends
		for len(run) > 0 && run[0].ends == now {
			run = run[1:]
		}
	}
	return now
}

// BenchmarkQueueScale queues 10,000 jobs behind eight running ones on 8
// simulated 24 GiB GPUs and measures one placement pass (target < 20 ms),
// status and the job list with that queue (status target < 10 ms), and
// the daemon binary's resident memory holding it, and after listing it
// b.N times (target < 100 MiB); ns/op of rss is one full job list.
func BenchmarkQueueScale(b *testing.B) {
	const queued = 10000
	fill := func(h *ckptHarness) {
		for i := range 8 {
			h.submit(api.JobSpec{Name: fmt.Sprintf("hold%d", i), Cmd: h.simjob("--vram", "20480"), VRAM: api.VRAM{MiB: 20480}})
		}
		for i := range 8 {
			h.waitJobState(fmt.Sprintf("hold%d", i), api.JobRunning)
		}
		specs := make([]api.JobSpec, queued)
		for i := range specs {
			specs[i] = api.JobSpec{Cmd: []string{"true"}, Dir: "/", VRAM: api.VRAM{MiB: []uint64{6, 12, 20}[i%3] << 10},
				GPUs: 1 + i%2, Priority: i % 5, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
		}
		t := time.Now()
		if _, err := h.client().Submit(ctxT(b), api.SubmitParams{Jobs: specs}); err != nil {
			b.Fatal(err)
		}
		b.Logf("submitting %d jobs in one batch took %v", queued, time.Since(t))
	}
	quiet := func(c *config.Config) { c.GPUPoll = time.Minute } // no background passes from samples
	b.Run("pass", func(b *testing.B) {
		h := newQueueHarness(b, "8x24G", quiet)
		fill(h)
		ctx := ctxT(b)
		b.ResetTimer()
		for range b.N {
			h.d.schedulePass(ctx)
		}
		b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/pass")
	})
	b.Run("status", func(b *testing.B) {
		h := newQueueHarness(b, "8x24G", quiet)
		fill(h)
		c := h.client()
		measure(b, func() error { _, err := c.Status(context.Background()); return err })
	})
	b.Run("rss", func(b *testing.B) {
		h := prepareCkpt(b, config.DriverSim, func(c *config.Config) { c.Sim = "8x24G" })
		dp := h.startBinary()
		fill(h)
		queuedRSS, err := rssKiB(dp.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for range b.N {
			if _, err := h.client().Jobs(ctxT(b), api.JobsParams{}); err != nil {
				b.Fatal(err)
			}
		}
		listedRSS, err := rssKiB(dp.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(queuedRSS)/1024, "RSS-MiB-queued")
		b.ReportMetric(float64(listedRSS)/1024, "RSS-MiB-after-listing")
	})
}

// rssKiB reads a process's resident memory from /proc/PID/status.
func rssKiB(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
