package daemon

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/store"
)

// gatedGPUs is a GPU backend whose every sample waits for the test to hand
// it its answer, so that samples can end in any order. It models when a
// sample answers, not what NVML answers: the devices are the test's.
type gatedGPUs struct{ asked chan chan gpu.Sample }

func (g *gatedGPUs) Name() string { return "gated" }
func (g *gatedGPUs) Sample(ctx context.Context) (gpu.Sample, error) {
	answer := make(chan gpu.Sample)
	g.asked <- answer
	return <-answer, nil
}
func (g *gatedGPUs) BetweenCalls(uint32, func()) error { return nil }
func (g *gatedGPUs) Close() error                      { return nil }

// TestOlderSampleNeverReplacesNewer: refresh runs from the sampling loop
// and from callers (a thaw, the tests' refresh) at once. A sample that
// began first but ended last (here: one taken before a GPU's memory moved
// and answered after one taken since) must not become the view. The likely
// cause of one CI failure (TestGPUMissingIsReportedAndRefused, 2026-11-29):
// a test set a GPU missing and refreshed, and its run on that GPU was then
// accepted, as if the loop's sample begun before had ended last.
func TestOlderSampleNeverReplacesNewer(t *testing.T) {
	st, err := store.OpenRecords(filepath.Join(t.TempDir(), "procs"))
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedGPUs{asked: make(chan chan gpu.Sample)}
	s := newSampler(g, 0, proctable.New(st, nil), zap.NewNop())
	sampled := 0
	s.onSample = func() { sampled++ }
	used := func(mib uint64) gpu.Sample {
		return gpu.Sample{Devices: []gpu.Device{{Index: 0, UUID: "GPU-0", TotalMiB: 1000, UsedMiB: mib}}, Procs: []gpu.ProcUsage{}}
	}
	refresh := func() chan error {
		done := make(chan error, 1)
		go func() { done <- s.refresh(context.Background()) }()
		return done
	}
	olderDone := refresh()
	older := <-g.asked
	newerDone := refresh()
	newer := <-g.asked
	newer <- used(700)
	if err := <-newerDone; err != nil {
		t.Fatal(err)
	}
	older <- used(100)
	if err := <-olderDone; err != nil {
		t.Fatal(err)
	}
	if dev, _ := s.current().device("GPU-0"); dev.UsedMiB != 700 || sampled != 1 {
		t.Fatalf("view after the older sample ended last: %d MiB used, %d samples told; want the newer's 700, told once", dev.UsedMiB, sampled)
	}
	// The next sample to begin replaces it as ever.
	nextDone := refresh()
	(<-g.asked) <- used(300)
	if err := <-nextDone; err != nil {
		t.Fatal(err)
	}
	if dev, _ := s.current().device("GPU-0"); dev.UsedMiB != 300 {
		t.Fatalf("view after the next sample: %d MiB used, want 300", dev.UsedMiB)
	}
}
