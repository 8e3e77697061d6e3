package schedwait

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse parses a trace of 16 CPUs switching among 64 threads,
// each switch after a wake-up, as a flood on a many-core host records.
func BenchmarkParse(b *testing.B) {
	var sb strings.Builder
	ts := 1_000_000
	for i := range 100_000 {
		cpu, prev, next := i%16, 1000+i%64, 1000+(i+1)%64
		ts += 3
		fmt.Fprintf(&sb, "       gpuschedd-%d     (    999) [%03d] d..2. %d.%06d: sched_waking: comm=gpuschedd pid=%d prio=120 target_cpu=%03d\n", prev, cpu, ts/1e6, ts%1e6, next, cpu)
		fmt.Fprintf(&sb, "       gpuschedd-%d     (    999) [%03d] d..2. %d.%06d: sched_wakeup: comm=gpuschedd pid=%d prio=120 target_cpu=%03d\n", prev, cpu, ts/1e6, ts%1e6, next, cpu)
		fmt.Fprintf(&sb, "       gpuschedd-%d     (    999) [%03d] d..2. %d.%06d: sched_switch: prev_comm=gpuschedd prev_pid=%d prev_prio=120 prev_state=S ==> next_comm=gpuschedd next_pid=%d next_prio=120\n", prev, cpu, ts/1e6, ts%1e6, prev, next)
	}
	text := sb.String()
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		if _, err := Parse(strings.NewReader(text), func(string) bool { return true }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/300_000, "ns/event")
}
