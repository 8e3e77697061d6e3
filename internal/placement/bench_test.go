package placement_test

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/placement"
)

// benchWorld is 8 busy 80 GiB GPUs (preemptible and other managed jobs,
// external processes, a permanent filler) and a queue of n jobs of mixed
// sizes, priorities, ages and owners, most of which do not fit.
func benchWorld(n int) (placement.Snapshot, []placement.Job) {
	r := rand.New(rand.NewPCG(1, 2))
	gpus := make([]placement.GPU, 8)
	for i := range gpus {
		g := dev(i, 81920, 0,
			victim(fmt.Sprintf("pre%d", i), r.IntN(2), uint64(8000+r.IntN(16000))),
			victim(fmt.Sprintf("pre%d-b", i), r.IntN(3), uint64(2000+r.IntN(6000))),
			placement.Occupant{Kind: placement.Managed, ID: fmt.Sprintf("job%d", i), DeclaredMiB: 20000, UsedMiB: 15000, PeakMiB: 18000, Priority: 2},
			ext(fmt.Sprintf("x%d", i), uint64(1000+r.IntN(12000)), 13000))
		if i%4 == 0 {
			g.Occupants = append(g.Occupants, placement.Occupant{Kind: placement.Filler, ID: fmt.Sprintf("f%d", i), UsedMiB: 8000, Permanent: true})
		}
		if i == 5 {
			g.Occupants = append(g.Occupants, victim("wide", 0, 6000)) // on GPUs 5 and 6
		}
		if i == 6 {
			g.Occupants = append(g.Occupants, victim("wide", 0, 6000))
		}
		for _, o := range g.Occupants {
			g.UsedMiB += o.UsedMiB
		}
		g.UsedMiB += 300
		gpus[i] = g
	}
	sizes := []uint64{0, 2000, 4000, 8000, 16000, 24000, 40000, 60000, 90000}
	counts := []int{1, 1, 1, 2, 4}
	queue := make([]placement.Job, n)
	for k := range queue {
		queue[k] = placement.Job{
			ID:       fmt.Sprintf("j%05d", k),
			Owner:    fmt.Sprintf("user%d", r.IntN(5)),
			Priority: r.IntN(4),
			Seq:      uint64(k + 1),
			QueuedAt: now.Add(-time.Duration(r.IntN(180)) * time.Minute),
			GPUs:     counts[r.IntN(len(counts))],
			VRAMMiB:  sizes[r.IntN(len(sizes))],
		}
	}
	served := map[string]placement.Served{}
	for u := range 5 {
		served[fmt.Sprintf("user%d", u)] = placement.Served{Running: u % 3, Last: now.Add(-time.Duration(u) * time.Minute)}
	}
	return placement.Snapshot{Now: now, GPUs: gpus, Options: placement.DefaultOptions(), Served: served}, queue
}

func BenchmarkPlace10kJobs8GPUs(b *testing.B) {
	snap, queue := benchWorld(10000)
	plan := placement.Place(snap, queue)
	b.Logf("starts %d (%d preempting), waits %d, infeasible %d",
		len(plan.Starts), countPreempting(plan), len(plan.Waits), len(plan.Infeasible))
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		placement.Place(snap, queue)
	}
	b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e6, "ms/pass")
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N)/1e6, "cpu-ms/pass")
}

// cpuTime is the process's CPU time (user and system, GC included): on a
// shared machine the wall time per pass also counts other processes.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func countPreempting(p placement.Plan) int {
	n := 0
	for _, s := range p.Starts {
		if len(s.Preempt) > 0 {
			n++
		}
	}
	return n
}
