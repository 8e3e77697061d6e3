package daemon

import (
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestThawOfStoppedProcess: the driver answers nothing for a stopped
// process (its restore thread does not run; on a lent H200 neither does
// anything else, docs/hardware.md), and the fakes wait so too. The daemon
// continues the trees it stopped before restoring them (every thaw test
// shows it); a process its owner stopped made the thaw wait until
// --checkpoint-timeout and left it locked. Now the thaw is refused at once,
// naming the stop, before any driver call: the process stays frozen, all
// in host RAM; a thaw once it runs brings it back.
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
			wantCode(t, err, api.CodeConflict)
			if !strings.Contains(err.Error(), "is stopped") {
				t.Errorf("refusal %q should name the stop", err)
			}
			if p := h.proc("a"); p.State != api.StateFrozen || p.HostMiB != 800 || h.used(0) != 0 {
				t.Fatalf("after the refused thaw: %s, %d MiB in host RAM, GPU 0 %d MiB; want frozen, all in host RAM", p.State, p.HostMiB, h.used(0))
			}
			if err := continueTree(ref); err != nil {
				t.Fatal(err)
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
