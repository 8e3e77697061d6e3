package memfill

import (
	"os"
	"testing"
	"time"
)

// BenchmarkHandover times a hand-over: a helper holds 20 GiB of a 24 GiB
// simulated GPU in 256 MiB chunks, and Set raises the reserve to 8 GiB.
// The time is until the reply, when the memory is free. Lowering the
// reserve again (the filler grows back) is not timed. Each simulated chunk
// freed rewrites the helper's registry record, so the sim directory's
// filesystem shows: the daemon keeps it under /run, a tmpfs like /dev/shm.
func BenchmarkHandover(b *testing.B) {
	for _, fs := range []struct{ name, parent string }{{"sim-on-tmpfs", "/dev/shm"}, {"sim-on-TMPDIR", ""}} {
		b.Run(fs.name, func(b *testing.B) {
			if _, err := os.Stat(fs.parent); fs.parent != "" && err != nil {
				b.Skip(err)
			}
			benchmarkHandover(b, newRig(b, fs.parent))
		})
	}
}

func benchmarkHandover(b *testing.B, r *rig) {
	f := r.start(b)
	const target, reserve = 20480, 8192
	st, err := f.Set(ctx(b), target, 0)
	if err != nil {
		b.Fatal(err)
	}
	full := st.HeldMiB
	var sum, worst time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		st, err := f.Set(ctx(b), target, reserve)
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if st.FreeMiB < simGPUMiB-target+reserve {
			b.Fatalf("hand-over incomplete: %+v", st)
		}
		sum += d
		worst = max(worst, d)
		b.StopTimer()
		if st, err := f.Set(ctx(b), target, 0); err != nil || st.HeldMiB != full {
			b.Fatalf("grow back: %+v, %v", st, err)
		}
		b.StartTimer()
	}
	mean := float64(sum) / float64(b.N) / 1e6
	b.ReportMetric(mean, "handover-ms")
	b.ReportMetric(float64(worst)/1e6, "handover-max-ms")
	b.Logf("hand-over of %d MiB in %d MiB chunks (%d held): mean %.3f ms, max %.3f ms over %d",
		reserve, DefaultChunkMiB, full, mean, float64(worst)/1e6, b.N)
}
