package daemon

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil/rank"
	"github.com/gpusched/gpusched/pkg/api"
)

// benchProcesses is how many managed processes the control-plane
// benchmarks keep in the table.
const benchProcesses = 100

// BenchmarkStatus measures `status` with 100 managed processes through the
// Go client (request encoded, response fully decoded): on one connection,
// on a fresh connection per request, and on one connection while a kill is
// stuck in a one-hour grace period. It reports requests/s and p50/p99
// latency. Target: >= 20,000/s and p99 < 1 ms on one connection.
func BenchmarkStatus(b *testing.B) {
	h := newHarness(b)
	for i := range benchProcesses {
		h.run(fmt.Sprintf("p%03d", i), "sleep", "100000")
	}
	b.Run("one-conn", func(b *testing.B) {
		c := h.client()
		measure(b, func() error { _, err := c.Status(context.Background()); return err })
	})
	b.Run("fresh-conn", func(b *testing.B) {
		measure(b, func() error {
			c, err := api.Dial(context.Background(), h.cfg.Socket)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Status(context.Background())
			return err
		})
	})
	b.Run("during-slow-kill", func(b *testing.B) {
		h.run("stuck", "sh", "-c", `trap "echo got-term" TERM; echo ready; while :; do sleep 0.05; done`)
		h.followUntil("stuck", "ready")
		killed := make(chan error, 1)
		go func() {
			_, err := h.client().Kill(context.Background(), api.KillParams{Name: "stuck", Grace: api.Duration(time.Hour)})
			killed <- err
		}()
		h.followUntil("stuck", "got-term")
		c := h.client()
		measure(b, func() error { _, err := c.Status(context.Background()); return err })
		b.StopTimer()
		h.client().Kill(context.Background(), api.KillParams{Name: "stuck", Signal: "KILL"})
		if err := <-killed; err != nil {
			b.Fatal(err)
		}
	})
	b.Run("ps-one-conn", func(b *testing.B) {
		c := h.client()
		measure(b, func() error { _, err := c.PS(context.Background(), api.PSParams{}); return err })
	})
}

// measure times b.N calls of op and reports throughput and percentiles.
func measure(b *testing.B, op func() error) {
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		t0 := time.Now()
		if err := op(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(rank.Percentile(lat, 50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(rank.Percentile(lat, 99).Microseconds()), "p99-µs")
}
