package routerbench_test

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/testutil/rank"
)

// baselineEnv names another gpusched-router binary (an earlier commit's,
// executable by every user) for BenchmarkRouterBaseline to compare with.
const baselineEnv = "GPUSCHED_BENCH_ROUTER_BASELINE"

// baselineRounds are the interleaved rounds of BenchmarkRouterBaseline.
const baselineRounds = 4

// BenchmarkRouterBaseline compares the router's cost per request with a
// baseline router binary's in the same run: both serve the same config
// and model server, and rounds of the no-op requests/s load through this
// router, through the baseline and direct are interleaved, so that a
// shared machine's drift hits all three alike. It reports medians over the
// rounds. Skipped without GPUSCHED_BENCH_ROUTER_BASELINE.
func BenchmarkRouterBaseline(b *testing.B) {
	testutil.RequiresRoot(b)
	bin := os.Getenv(baselineEnv)
	if bin == "" {
		b.Skipf("%s names no baseline router binary", baselineEnv)
	}
	for range b.N {
		e := newEnv(b)
		e.startRouter()
		baseURL, basePID := e.launchRouter(bin, e.config)
		e.ttfb(e.router, "alpha") // cold start
		e.ttfb(baseURL, "alpha")
		directURL := fmt.Sprintf("http://127.0.0.1:%d", e.ports["alpha"])
		var this, base, direct []load
		for range baselineRounds {
			this = append(this, e.load(e.router, e.rpid, quick, workers, throughputN))
			base = append(base, e.load(baseURL, basePID, quick, workers, throughputN))
			direct = append(direct, e.load(directURL, e.rpid, quick, workers, throughputN))
		}
		for i := range this {
			b.Logf("round %d: this router %.0f rps (%s); baseline %.0f rps (%s); direct %.0f rps (%s)",
				i, this[i].rps, this[i], base[i].rps, base[i], direct[i].rps, direct[i])
		}
		rt, rb := medianOf(this, func(l load) time.Duration { return l.router }), medianOf(base, func(l load) time.Duration { return l.router })
		st, sb := medianOf(this, func(l load) time.Duration { return l.server }), medianOf(base, func(l load) time.Duration { return l.server })
		b.ReportMetric(us(rt), "router-cpu-us/req")
		b.ReportMetric(us(rb), "baseline-router-cpu-us/req")
		b.ReportMetric(float64(rt)/float64(rb), "router-cpu/baseline")
		b.Logf("medians of %d rounds, CPU per request: router %.0f us (baseline %.0f us, %.2fx), model server behind it %.0f us (behind the baseline %.0f us)",
			baselineRounds, us(rt), us(rb), float64(rt)/float64(rb), us(st), us(sb))
	}
}

// medianOf is the median of f over ls.
func medianOf(ls []load, f func(load) time.Duration) time.Duration {
	ds := make([]time.Duration, len(ls))
	for i, l := range ls {
		ds[i] = f(l)
	}
	slices.Sort(ds)
	return rank.Percentile(ds, 50)
}
