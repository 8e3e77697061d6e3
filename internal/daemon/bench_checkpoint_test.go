package daemon

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// BenchmarkFreezeThawRoundTrip measures one freeze plus one thaw of a
// process holding one simulated CUDA job of 1000 MiB, through the socket on
// one client connection, with the simulated driver at zero latency: what
// is left is the daemon's own cost (plus the driver's bookkeeping). It
// reports the round trip's p50/p99 (measure: p50-µs, p99-µs; target p50
// < 5 ms), the driver's share (lock+checkpoint+restore+unlock, as the
// daemon's phase timings say) and daemon_overhead_ms = round trip - driver
// share at p50 (target < 5 ms). "stop" freezes with SIGSTOP (and thaws with
// SIGCONT), as FreezeStop=true does; "nostop" freezes with stop=false (the
// per-call override of FreezeStop), to show the signals' share.
func BenchmarkFreezeThawRoundTrip(b *testing.B) {
	h := newCkptHarness(b, config.DriverSim)
	h.jobs("train", 0, 1000)
	c := h.client() // one connection, shared by every run of both cases
	for _, tc := range []struct {
		name string
		stop bool
	}{{"stop", true}, {"nostop", false}} {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			var rt, drv, overhead, signals []time.Duration
			measure(b, func() error {
				t0 := time.Now()
				fr, err := c.Freeze(ctx, api.FreezeParams{Name: "train", Stop: &tc.stop})
				if err != nil {
					return err
				}
				th, err := c.Thaw(ctx, api.ThawParams{Name: "train"})
				if err != nil {
					return err
				}
				took := time.Since(t0)
				d := benchDur(fr.MS["lock"] + fr.MS["checkpoint"] + th.MS["restore"] + th.MS["unlock"])
				rt, drv, overhead = append(rt, took), append(drv, d), append(overhead, took-d)
				signals = append(signals, benchDur(fr.MS["stop"]+th.MS["continue"]))
				return nil
			})
			b.ReportMetric(benchMS(benchPctl(drv, 50)), "driver-p50-ms")
			b.ReportMetric(benchMS(benchPctl(overhead, 50)), "daemon_overhead_ms")
			b.ReportMetric(benchMS(benchPctl(overhead, 99)), "daemon_overhead-p99-ms")
			b.ReportMetric(benchMS(benchPctl(signals, 50)), "stop+cont-p50-ms")
			b.Logf("N=%d round trip p50 %.3f ms p99 %.3f ms (target p50 < 5 ms); driver p50 %.3f ms; daemon overhead p50 %.3f ms p99 %.3f ms (target < 5 ms); SIGSTOP+SIGCONT p50 %.3f ms",
				b.N, benchMS(benchPctl(rt, 50)), benchMS(benchPctl(rt, 99)), benchMS(benchPctl(drv, 50)), benchMS(benchPctl(overhead, 50)), benchMS(benchPctl(overhead, 99)), benchMS(benchPctl(signals, 50)))
		})
	}
}

// BenchmarkSwap measures swap through the cuda-checkpoint CLI driver (the
// fake tool, with checkpoint and restore each delayed 50 ms) against a
// plain freeze and a plain thaw of the same processes in the same run.
// "fit": two 1000 MiB processes on a 4 GiB GPU, swapped concurrently;
// target ratio_to_max = swap / max(freeze, thaw) <= 1.1. "nofit": two 3000
// MiB processes, swapped freeze first; target ratio_to_sum = swap /
// (freeze + thaw) <= 1.05. Ratios are of the p50s. Each iteration swaps in
// the other direction (a off b on, then b off a on), then freezes and thaws
// the process just thawed (timer stopped: ns/op is the swap alone).
func BenchmarkSwap(b *testing.B) {
	for _, tc := range []struct {
		name       string
		mib        int
		concurrent bool
	}{{"fit", 1000, true}, {"nofit", 3000, false}} {
		// One daemon per case, built here (not per run of the case) and
		// stopped before the next case starts.
		h := benchSwapHarness(b, tc.mib)
		c := h.client()
		on, off := "a", "b" // a runs, b is frozen; kept across runs of the case
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			var swaps, freezes, thaws []time.Duration
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				res, err := c.Swap(ctx, api.SwapParams{Freeze: on, Thaw: off})
				if err != nil {
					b.Fatal(err)
				}
				swaps = append(swaps, time.Since(t0))
				if res.Concurrent != tc.concurrent {
					b.Fatalf("swap concurrent=%v, want %v", res.Concurrent, tc.concurrent)
				}
				on, off = off, on

				b.StopTimer()
				t0 = time.Now()
				if _, err := c.Freeze(ctx, api.FreezeParams{Name: on}); err != nil {
					b.Fatal(err)
				}
				freezes = append(freezes, time.Since(t0))
				t0 = time.Now()
				if _, err := c.Thaw(ctx, api.ThawParams{Name: on}); err != nil {
					b.Fatal(err)
				}
				thaws = append(thaws, time.Since(t0))
				b.StartTimer()
			}
			b.StopTimer()
			sw, fr, th := benchPctl(swaps, 50), benchPctl(freezes, 50), benchPctl(thaws, 50)
			b.ReportMetric(benchMS(sw), "swap-p50-ms")
			b.ReportMetric(benchMS(benchPctl(swaps, 99)), "swap-p99-ms")
			b.ReportMetric(benchMS(fr), "freeze-p50-ms")
			b.ReportMetric(benchMS(th), "thaw-p50-ms")
			if tc.concurrent {
				r := float64(sw) / float64(max(fr, th))
				b.ReportMetric(r, "ratio_to_max")
				b.Logf("N=%d fit: swap p50 %.1f ms, freeze %.1f ms, thaw %.1f ms: swap/max = %.3f (target <= 1.1)",
					b.N, benchMS(sw), benchMS(fr), benchMS(th), r)
			} else {
				r := float64(sw) / float64(fr+th)
				b.ReportMetric(r, "ratio_to_sum")
				b.Logf("N=%d nofit: swap p50 %.1f ms, freeze %.1f ms, thaw %.1f ms: swap/sum = %.3f (target <= 1.05)",
					b.N, benchMS(sw), benchMS(fr), benchMS(th), r)
			}
		})
		h.killAll()
	}
}

// benchSwapHarness is a CLI-driver daemon with the fake tool's checkpoint
// and restore delayed 50 ms, running a (mib MiB) and frozen b (mib MiB),
// both on GPU 0.
func benchSwapHarness(b *testing.B, mib int) *ckptHarness {
	b.Helper()
	h := prepareCkpt(b, config.DriverCLI)
	h.faults(`{"checkpoint": {"delay_ms": 50}, "restore": {"delay_ms": 50}}`)
	h.begin()
	// Two 3000 MiB processes never run side by side on 4 GiB: freeze b
	// before a starts.
	h.jobs("b", 0, mib)
	if _, err := h.client().Freeze(ctxT(b), api.FreezeParams{Name: "b"}); err != nil {
		b.Fatal(err)
	}
	h.jobs("a", 0, mib)
	return h
}

// benchPctl is the p-th percentile of xs (sorted in place).
func benchPctl(xs []time.Duration, p int) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[min(len(xs)-1, len(xs)*p/100)]
}

func benchMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func benchDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
