package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestStrayFillerHelperReleasedAtStart is a daemon that died between
// starting a filler's helper and saving its record (as the crash test
// found): the next daemon releases the helper no record names instead of
// leaving it holding GPU memory until its orphan timeout.
func TestStrayFillerHelperReleasedAtStart(t *testing.T) {
	h := newCkptHarness(t, config.DriverSim, func(c *config.Config) { c.Sim = fillGPU })
	f, err := h.client().Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 0}, MiB: api.VRAM{MiB: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	h.waitSettled(0, 4096)
	start, err := procfs.StartTime(f.PID)
	if err != nil {
		t.Fatal(err)
	}
	h.stop() // the helper stays, holding, for the next daemon
	recs, err := filepath.Glob(filepath.Join(h.cfg.StateDir, "fillers", "*.json"))
	if err != nil || len(recs) != 1 {
		t.Fatalf("filler records %v, %v; want one", recs, err)
	}
	if err := os.Remove(recs[0]); err != nil {
		t.Fatal(err)
	}

	h.begin()
	h.helperGone(f.PID, start)
	if u := h.used(0); u != 0 {
		t.Fatalf("GPU 0 holds %d MiB after the stray helper went", u)
	}
	if fs, err := h.client().Fillers(ctxT(t)); err != nil || len(fs) != 0 {
		t.Fatalf("fillers %+v, %v; want none", fs, err)
	}
}
