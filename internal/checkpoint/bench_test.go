package checkpoint

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/execx"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/internal/testutil/rank"
)

// BenchmarkCLIOverhead measures what the CLI driver adds to one run of the
// cuda-checkpoint tool: cli.State(pid) against exec of the same (fake)
// tool with --get-state --pid, with the same environment, for a live
// simulated CUDA process. Each iteration times both, in alternating order.
// It reports both p50s in µs, the p50 of the per-iteration differences
// (cli - exec) and the ratio of the p50s.
func BenchmarkCLIOverhead(b *testing.B) {
	bins := testutil.Build(b)
	dir := b.TempDir()
	reg := newSimGPUs(b, 1, 4096)
	pid := startSimJob(b, reg, 0, 1000)
	link, err := checkpointtest.Install(dir, bins.FakeCudaCheckpoint, nil)
	if err != nil {
		b.Fatal(err)
	}
	cli, err := NewCLI(context.Background(), CLIOptions{Path: link})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	viaCLI := func() time.Duration {
		t0 := time.Now()
		st, err := cli.State(ctx, pid)
		took := time.Since(t0)
		if err != nil || st != StateRunning {
			b.Fatalf("cli.State = %q, %v", st, err)
		}
		return took
	}
	direct := func() time.Duration {
		t0 := time.Now()
		cmd := exec.Command(link, "--get-state", "--pid", strconv.Itoa(pid))
		cmd.Env = execx.MinimalEnv
		out, err := cmd.Output()
		took := time.Since(t0)
		if err != nil || strings.TrimSpace(string(out)) != string(StateRunning) {
			b.Fatalf("exec --get-state = %q, %v", out, err)
		}
		return took
	}
	viaCLI() // warm the page cache and the binary
	direct()

	cliLat := make([]time.Duration, 0, b.N)
	execLat := make([]time.Duration, 0, b.N)
	diffs := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			cliLat = append(cliLat, viaCLI())
			execLat = append(execLat, direct())
		} else {
			execLat = append(execLat, direct())
			cliLat = append(cliLat, viaCLI())
		}
		diffs = append(diffs, cliLat[i]-execLat[i])
	}
	b.StopTimer()
	c, e, d := benchP50(cliLat), benchP50(execLat), benchP50(diffs)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(c), "cli-p50-µs")
	b.ReportMetric(us(e), "exec-p50-µs")
	b.ReportMetric(us(d), "overhead-p50-µs")
	b.ReportMetric(float64(c)/float64(e), "cli/exec")
	b.Logf("N=%d cli.State p50 %.0f µs, direct exec p50 %.0f µs: the driver adds %.0f µs (x%.3f)",
		b.N, us(c), us(e), us(d), float64(c)/float64(e))
}

// benchP50 is the median of xs (sorted in place).
func benchP50(xs []time.Duration) time.Duration {
	slices.Sort(xs)
	return rank.Percentile(xs, 50)
}
