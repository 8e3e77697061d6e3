package daemon

import (
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkFillerHandover times a hand-over through the daemon's own path
// (the reserve sent over the pipe, the helper freeing chunks, its reply):
// from the request to the memory being free on a simulated 24 GiB GPU held
// at 0.95, for 8 GiB each time. The memory is checked free in the registry
// before the clock stops counting the next round.
func BenchmarkFillerHandover(b *testing.B) {
	h := newQueueHarness(b, fillGPU)
	if _, err := h.client().Fill(ctxT(b), api.FillParams{GPU: &api.GPURef{Index: 0}, Ratio: 0.95}); err != nil {
		b.Fatal(err)
	}
	uuid := h.d.gpuView().devices[0].UUID
	need := map[string]uint64{uuid: 8192}
	var ms []float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		h.waitSettled(0, fillTarget)
		b.StartTimer()
		t := time.Now()
		done := h.d.handOver(ctxT(b), 0, need)
		ms = append(ms, msSince(t))
		b.StopTimer()
		if free := 24576 - h.used(0); free < 8192 {
			b.Fatalf("after the hand-over %d MiB free, want 8192", free)
		}
		done()
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(ms)
	b.ReportMetric(mean(ms), "handover-ms")
	b.ReportMetric(rank.Percentile(ms, 99), "p99-ms")
	b.ReportMetric(ms[len(ms)-1], "max-ms")
}

// BenchmarkFillerTracking runs a process that oscillates (ramps to 8 GiB
// in 10 steps over 1 s, holds 0.5 s, frees everything, 4 times) under
// run --filled 0.95, reading the GPU's total from the registry every
// millisecond: how far below the target the total sits (tracking error)
// and how often it is within one chunk.
func BenchmarkFillerTracking(b *testing.B) {
	for range b.N {
		h := newQueueHarness(b, fillGPU)
		var mu sync.Mutex
		var under []float64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-stop:
					return
				case <-t.C:
				}
				u := h.used(0)
				mu.Lock()
				under = append(under, float64(fillTarget)-float64(u))
				mu.Unlock()
			}
		})
		_, err := h.client().Run(ctxT(b), api.RunParams{Name: "osc", Dir: "/", GPU: &api.GPURef{Index: 0}, Filled: 0.95,
			Cmd: h.simjob("--vram", "8192", "--ramp", "1", "--hold", "0.5", "--cycles", "3"), Env: map[string]string{"PATH": os.Getenv("PATH")}})
		if err != nil {
			b.Fatal(err)
		}
		done := errors.New("done")
		oom := false
		err = h.client().FollowLogs(ctxT(b), "osc", -1, func(l string) error {
			oom = oom || strings.Contains(l, "out of memory")
			if strings.HasPrefix(l, "simjob: done") {
				return done
			}
			return nil
		})
		close(stop)
		wg.Wait()
		if !errors.Is(err, done) || oom {
			b.Fatalf("oscillating job: %v (oom %v)", err, oom)
		}
		within, over := 0, 0
		var abs []float64
		for _, d := range under {
			if d >= 0 && d < fillChunk {
				within++
			}
			if d < 0 {
				over++
			}
			abs = append(abs, max(d, -d))
		}
		slices.Sort(abs)
		b.ReportMetric(mean(abs), "mean-err-MiB")
		p99 := rank.Percentile(abs, 99)
		b.ReportMetric(p99, "p99-err-MiB")
		b.ReportMetric(100*float64(within)/float64(len(under)), "%-within-chunk")
		b.ReportMetric(100*float64(over)/float64(len(under)), "%-above-target")
		b.Logf("%d samples: mean |target-total| %.0f MiB, p99 %.0f MiB, within one chunk below %.1f%%, above the target %.1f%%",
			len(under), mean(abs), p99, 100*float64(within)/float64(len(under)), 100*float64(over)/float64(len(under)))
	}
}

// mean is the arithmetic mean of xs (0 for none).
func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}
