package daemon

import (
	"slices"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/testutil/rank"
)

// BenchmarkMetricsScrapeUnderFlood: root's scrapes of /metrics, each on a
// connection of its own, alone and while a local user holds its share of
// the metrics connections (each with a request it never reads the answer
// of) after opening 128 more, which the daemon closed. It reports p50 and
// p99 of 200 scrapes in each phase (b.N is not used: the phases are the
// measurement).
func BenchmarkMetricsScrapeUnderFlood(b *testing.B) {
	const scrapes, flood = 200, 4 * metricsMaxConns
	setMetricsTimeouts(b, time.Minute, time.Minute, time.Minute)
	attacker := testutil.NewUser(b, "gsmsh1", "gsmshx")
	addr := testutil.FreeLoopback(b)
	newHarness(b, func(c *config.Config) { c.MetricsAddr = addr })
	share := config.DefaultLimits().MetricsConns
	measure := func(phase string) {
		took := make([]time.Duration, scrapes)
		for i := range took {
			start := time.Now()
			if err := scrapeWithin(addr, scrapeGuard); err != nil {
				b.Fatalf("%s: scrape %d: %v", phase, i+1, err)
			}
			took[i] = time.Since(start)
		}
		slices.Sort(took)
		p50, p99 := rank.Percentile(took, 50), rank.Percentile(took, 99)
		b.Logf("%s: root's scrape p50 %.2f ms, p99 %.2f ms (%d scrapes)", phase, ms(p50), ms(p99), scrapes)
		b.ReportMetric(ms(p50), phase+"-p50-ms")
		b.ReportMetric(ms(p99), phase+"-p99-ms")
	}
	for range b.N {
		measure("alone")
		stop := startMetricsFlood(b, attacker, addr, share+flood, share+flood)
		measure("flood")
		stop()
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
