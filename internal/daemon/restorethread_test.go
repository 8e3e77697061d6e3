package daemon

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestThawOfStoppedProcess: a restore proceeds only while the process's
// CUDA restore thread runs (the fakes model it). The daemon continues the
// trees it stopped before restoring them (every thaw test shows it); a
// process its owner stopped makes the restore wait until
// --checkpoint-timeout. The thaw then fails without losing anything: the
// process is recorded locked, its state to be asked of the driver, since
// the restore may yet complete once the thread runs (the api driver's call
// does); a thaw once it runs brings it back.
func TestThawOfStoppedProcess(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			h := newCkptHarness(t, driver, func(c *config.Config) { c.CheckpointTimeout = time.Second })
			h.jobs("a", 0, 800)
			noStop := false
			if _, err := h.client().Freeze(ctxT(t), api.FreezeParams{Name: "a", Stop: &noStop}); err != nil {
				t.Fatal(err)
			}
			pid := h.cudaPIDs("a")[0]
			start, err := procfs.StartTime(pid)
			if err != nil {
				t.Fatal(err)
			}
			ref := []proctable.ProcRef{{PID: pid, Start: start}}
			if err := signalRef(ref[0], unix.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer continueTree(ref) // should the test fail while it is stopped
			if err := waitStopped(ref, time.Minute); err != nil {
				t.Fatal(err)
			}
			_, err = h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"})
			wantCode(t, err, api.CodeTimeout)
			if p := h.proc("a"); p.State != api.StateLocked || p.HostMiB != 800 || h.used(0) != 0 {
				t.Fatalf("after the stalled thaw: %s, %d MiB in host RAM, GPU 0 %d MiB; want locked, all in host RAM", p.State, p.HostMiB, h.used(0))
			}
			if err := continueTree(ref); err != nil {
				t.Fatal(err)
			}
			if driver == config.DriverAPI {
				// Its timed-out call is still waiting in the helper, and
				// restores now.
				waitFor(t, func() bool { return allEqual(h.cudaStates("a"), "locked") })
			}
			if _, err := h.client().Thaw(ctxT(t), api.ThawParams{Name: "a"}); err != nil {
				t.Fatalf("thaw once the process runs: %v", err)
			}
			if h.used(0) != 800 || !allEqual(h.cudaStates("a"), "running") {
				t.Fatalf("after the thaw: GPU 0 %d MiB, driver states %v", h.used(0), h.cudaStates("a"))
			}
		})
	}
}
