package daemon

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// holdPageSource makes the page servers the test starts wait, before
// their background transfer, until the returned fifo is opened for
// writing and closed (EnvHold).
func holdPageSource(t *testing.T) string {
	t.Helper()
	hold := filepath.Join(t.TempDir(), "hold")
	if err := unix.Mkfifo(hold, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(lazypages.EnvHold, hold)
	return hold
}

// TestStreamedThawFromDisk thaws a hibernated process, fully and then
// from an incremental image, with --stream-restore (the default): its
// memory comes from our page source, and the tree is thawed only once all
// of it is in. With cuda-checkpoint, whose stand-in reads the target's
// environment from outside it, the thaw fails if any page is still on
// disk then. The process goes on with every word of its memory as it was;
// with --stream-restore=false CRIU reads the pages itself.
func TestStreamedThawFromDisk(t *testing.T) {
	for _, driver := range []string{config.DriverSim, config.DriverCLI} {
		t.Run(driver, func(t *testing.T) {
			h := newDiskHarness(t, driver)
			requirePageSource(t, h)
			c := h.client()
			h.memJob("job", 128, 64)
			for i, full := range []bool{true, false} {
				hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job", Full: full})
				if err != nil {
					t.Fatal(err)
				}
				ticks := h.lastTick("job")
				res, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
				if err != nil {
					t.Fatal(err)
				}
				if res.MS["all_memory"] <= 0 || res.MS["running"] != 0 || res.MS["criu_restore"] > res.MS["all_memory"] {
					t.Fatalf("thaw %d was not streamed: %v", i, res.MS)
				}
				if _, err := os.Stat(filepath.Join(h.cfg.Snapshots(), hr.Snapshot, lazypages.LogName)); err != nil {
					t.Fatalf("thaw %d: no page source's log: %v", i, err)
				}
				h.verifyContinued("job", ticks)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.StreamRestore = false })
		c := h.client()
		h.memJob("job", 128, 64)
		if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"}); err != nil {
			t.Fatal(err)
		}
		ticks := h.lastTick("job")
		res, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
		if err != nil {
			t.Fatal(err)
		}
		if res.MS["all_memory"] != 0 {
			t.Fatalf("streamed with --stream-restore=false: %v", res.MS)
		}
		h.verifyContinued("job", ticks)
	})
}

// TestThawPageSourceKilled kills our page server with most of the
// process's memory still on disk (the server is held before its
// background transfer, EnvHold), and the thaw restores the process with
// CRIU's reads from the intact snapshot instead; it goes on from its
// hibernation with its memory verified. Lazy (--lazy-restore), the server
// is killed once the process runs again: the kernel would fill the rest
// with zeros, so the daemon kills that tree first. Streamed (the default),
// the restored tree is still stopped when the server is held, since it is
// resumed only once every page is in.
func TestThawPageSourceKilled(t *testing.T) {
	for _, mode := range []string{"lazy", "streamed"} {
		t.Run(mode, func(t *testing.T) {
			hold := holdPageSource(t)
			h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.LazyRestore = mode == "lazy" })
			requirePageSource(t, h)
			c := h.client()
			h.memJob("job", 128, 512)
			hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
			if err != nil {
				t.Fatal(err)
			}
			snap := filepath.Join(h.cfg.Snapshots(), hr.Snapshot)
			before := imageDigest(t, snap)
			ticks := h.lastTick("job")

			type thawed struct {
				res *api.CheckpointResult
				err error
			}
			done := make(chan thawed, 1)
			go func() {
				res, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
				done <- thawed{res, err}
			}()
			if mode == "lazy" {
				// It runs again (following the log through the daemon ends
				// while the process is not running, so the file is watched).
				awaitLine(t, h.proc("job").Log, fmt.Sprintf("tick %d", ticks+1))
			} else {
				// Opening the hold for writing returns once the server opened
				// it: the restore is done and the transfer has not started.
				w, err := os.OpenFile(hold, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if !h.stopped("job") {
					t.Errorf("the restored tree runs before its memory is in")
				}
			}
			if err := unix.Kill(lazyServerOf(t, snap), unix.SIGKILL); err != nil {
				t.Fatal(err)
			}
			th := <-done
			if th.err != nil {
				t.Fatalf("thaw after the page source died: %v", th.err)
			}
			if th.res.MS["all_memory"] != 0 {
				t.Fatalf("the thaw counts as served by the page source: %v", th.res.MS)
			}
			if p := h.proc("job"); p.State != api.StateRunning || p.Snapshot != hr.Snapshot {
				t.Fatalf("after the thaw: %+v", p)
			}
			if after := imageDigest(t, snap); after != before {
				t.Fatalf("the snapshot changed:\n%s\n%s", before, after)
			}
			h.verifyContinued("job", ticks)
		})
	}
}

// TestStreamedThawOwnerSignals: while a streamed thaw holds a user's
// restored tree stopped (its page server held before its transfer,
// EnvHold), the user, who owns those processes, signals its command.
// SIGCONT: it runs before its memory is all in, its faults are served, and
// the thaw completes with every word of its memory as it was. SIGKILL: the
// thaw ends with an answer and the process is recorded exited by that
// signal. Either way nothing of the thaw is left running and the daemon
// serves on.
func TestStreamedThawOwnerSignals(t *testing.T) {
	for _, sig := range []string{"CONT", "KILL"} {
		t.Run(sig, func(t *testing.T) {
			hold := holdPageSource(t)
			owner := testutil.NewUser(t, "gsstream1", "gsstream")
			h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gsstream" })
			requirePageSource(t, h)
			if _, errOut, code := h.ctlAs(owner, "run", "job", "--gpu", "0", "--", h.bins.SimJob, "--vram", "512", "--host-mem", "256", "--tick", "0.02"); code != 0 {
				t.Fatal(errOut)
			}
			h.followCount("job", "tick 3", 1)
			if _, errOut, code := h.ctlAs(owner, "hibernate", "job"); code != 0 {
				t.Fatal(errOut)
			}
			snap := filepath.Join(h.cfg.Snapshots(), h.proc("job").Snapshot)
			ticks := h.lastTick("job")
			type thawed struct {
				errOut string
				code   int
			}
			done := make(chan thawed, 1)
			go func() {
				_, errOut, code := h.ctlAs(owner, "thaw", "job")
				done <- thawed{errOut, code}
			}()
			w, err := os.OpenFile(hold, os.O_WRONLY, 0) // the restore is done, the transfer held
			if err != nil {
				t.Fatal(err)
			}
			pids := h.cudaPIDs("job")
			if len(pids) != 1 {
				t.Fatalf("restored CUDA processes: %v", pids)
			}
			kill := exec.Command("kill", "-"+sig, strconv.Itoa(pids[0]))
			asUser(kill, owner)
			if out, err := kill.CombinedOutput(); err != nil {
				t.Fatalf("kill -%s as %s: %v: %s", sig, owner.Name, err, out)
			}
			server := lazyServerOf(t, snap)
			w.Close() // the transfer goes on
			th := <-done
			waitPidExit(t, server)
			if sig == "CONT" {
				if th.code != 0 {
					t.Fatalf("thaw after the owner continued its process: exit %d: %s", th.code, th.errOut)
				}
				h.verifyContinued("job", ticks)
			} else {
				h.waitState("job", api.StateExited)
				if p := h.proc("job"); p.Exit == nil || p.Exit.Signal != "SIGKILL" {
					t.Fatalf("after its owner killed it mid-thaw (thaw exit %d: %s): %+v", th.code, th.errOut, p)
				}
			}
			if _, err := h.client().Status(ctxT(t)); err != nil {
				t.Fatalf("the daemon after the thaw: %v", err)
			}
		})
	}
}
