package daemon

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestHibernatedSurvivesCrashAndReboot hibernates a process under the real
// daemon binary, kill -9s the daemon, and thaws the process from disk
// under the next one; then the same after a simulated reboot: every
// managed process gone and the records from an earlier boot.
func TestHibernatedSurvivesCrashAndReboot(t *testing.T) {
	for _, reboot := range []bool{false, true} {
		name := map[bool]string{false: "kill-9", true: "reboot"}[reboot]
		t.Run(name, func(t *testing.T) {
			criu := testutil.CRIU(t)
			h := prepareCkpt(t, config.DriverCLI, func(c *config.Config) { c.CRIU = criu })
			dp := h.startBinary()
			c := h.client()
			h.memJob("job", 256, 32)
			h.run("other", "sleep", "600")
			hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			ticks := h.lastTick("job")

			_ = dp.cmd.Process.Kill()
			_ = dp.cmd.Wait()
			if reboot {
				other, _ := c.Process(ctxT(t), "other")
				killTree(t, other.InitPID)
				rebootRecords(t, filepath.Join(h.cfg.StateDir, "procs"))
			}
			h.startBinary()
			c = h.client()
			snaps, err := c.Snapshots(ctxT(t), api.SnapshotsParams{})
			if err != nil || len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != hr.Snapshot || !snaps.Snapshots[0].Holds {
				t.Fatalf("snapshots after restart: %+v, %v", snaps, err)
			}
			if p := h.proc("job"); p.State != api.StateHibernated {
				t.Fatalf("job after restart: %s", p.State)
			}
			if reboot {
				if p := h.proc("other"); p.State != api.StateExited {
					t.Fatalf("other after reboot: %s", p.State)
				}
			}
			tr, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			if tr.State != api.StateRunning || tr.Snapshot != hr.Snapshot {
				t.Fatalf("thaw after restart: %+v", tr)
			}
			reg, err := simgpu.Open(h.cfg.SimDir)
			if err != nil {
				t.Fatal(err)
			}
			h.reg = reg
			if u := h.used(0); u != 256 {
				t.Fatalf("GPU 0 holds %d MiB after the thaw, want 256", u)
			}
			h.verifyContinued("job", ticks)
			if _, err := c.Kill(ctxT(t), api.KillParams{Name: "job"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// killTree SIGKILLs a PID namespace's init (ending its tree) and waits.
func killTree(t *testing.T, initPID int) {
	t.Helper()
	if initPID > 0 {
		_ = unix.Kill(initPID, unix.SIGKILL)
		waitPidExit(t, initPID)
	}
}

// rebootRecords makes every persisted record look as if written during an
// earlier boot of the machine.
func rebootRecords(t *testing.T, dir string) {
	t.Helper()
	if editRecords(t, dir, func(m map[string]any) bool { m["boot_id"] = "an-earlier-boot"; return true }) == 0 {
		t.Fatalf("no records in %s", dir)
	}
}
