package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestDiskFullKeepsProcessFrozen hibernates into a 16 MiB tmpfs a process
// that needs more: it stays frozen in RAM with its memory intact, no
// partial image is left, and a thaw brings it back. No --disk-keep-free:
// the dump itself runs out of room, as when something else fills the disk
// meanwhile.
func TestDiskFullKeepsProcessFrozen(t *testing.T) {
	snapDir := testutil.Tmpfs(t, "disk-full", "16m")
	h := newDiskHarness(t, config.DriverCLI, func(c *config.Config) { c.SnapshotDir, c.DiskKeepFree = snapDir, 0 })
	c := h.client()
	h.memJob("job", 256, 64)
	ticks := h.lastTick("job")

	_, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "stays frozen") {
		t.Fatalf("error does not say where the process is: %v", err)
	}
	p := h.proc("job")
	if p.State != api.StateFrozen || p.Error == "" || p.Snapshot != "" {
		t.Fatalf("after a failed hibernate: %+v", p)
	}
	if left, _ := os.ReadDir(snapDir); len(left) != 0 {
		t.Fatalf("partial image left: %v", left)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}

func TestDiskBudgetRefusesBeforeDumping(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.DiskBudgetMiB = 16 })
	c := h.client()
	h.memJob("job", 128, 64)
	ticks := h.lastTick("job")
	_, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	wantCode(t, err, api.CodeResourceExhausted)
	if !strings.Contains(err.Error(), "--disk-budget") {
		t.Fatalf("error does not name the budget: %v", err)
	}
	// Its memory alone is over the budget: refused as it runs, not frozen
	// first (a tree within it until its GPU memory joins it there is
	// refused after the freeze, frozen in RAM).
	if p := h.proc("job"); p.State != api.StateRunning {
		t.Fatalf("after the refused hibernate: %s, want running", p.State)
	}
	h.verifyContinued("job", ticks)
	if snaps, _ := c.Snapshots(ctxT(t), api.SnapshotsParams{}); len(snaps.Snapshots) != 0 {
		t.Fatalf("snapshots: %+v", snaps.Snapshots)
	}
}

// TestDiskKeepFreeRefusesBeforeDumping: with --disk-keep-free 0.5 of a
// snapshot filesystem of 256 MiB, a real user's hibernate of a tree of
// 160 MiB is refused before anything is frozen or written, naming the
// setting, and the process runs on; root's of 16 MiB goes through. Without
// the floor the first fits on the filesystem and is dumped. status says
// what the filesystem has free, and what of it is kept.
func TestDiskKeepFreeRefusesBeforeDumping(t *testing.T) {
	u := testutil.NewUser(t, "gskeepf1", "gskeepf")
	snapDir := testutil.Tmpfs(t, "disk-keep-free", "256m")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.SnapshotDir, c.DiskKeepFree = "gskeepf", snapDir, 0.5
		c.Limits.DiskFraction = 0 // the user's own share is another test's
	})
	// status tells everyone what the disk has, and what of it is kept.
	st, err := h.client().Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.DiskKeepFree != 128<<20 || st.DiskFree <= 200<<20 || st.DiskFree > 256<<20 {
		t.Fatalf("status: disk free %d, kept %d; want about 256 MiB free and 128 MiB of it kept", st.DiskFree, st.DiskKeepFree)
	}
	if _, errOut, code := h.ctlAs(u, "run", "big", "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "160", "--tick", "0.02"); code != 0 {
		t.Fatalf("run big: %s", errOut)
	}
	h.followCount("big", "tick 3", 1)
	ticks := h.lastTick("big")
	_, errOut, code := h.ctlAs(u, "hibernate", "big")
	if want := "MiB of it free (--disk-keep-free 0.5): delete snapshots or kill hibernated processes"; code == 0 || !strings.Contains(errOut, want) {
		t.Fatalf("a hibernate past the floor: exit %d, %q; want a refusal saying %q", code, errOut, want)
	}
	if p := h.proc("big"); p.State != api.StateRunning || p.Snapshot != "" {
		t.Fatalf("the refused process: %s, snapshot %q; want it running as before", p.State, p.Snapshot)
	}
	h.verifyContinued("big", ticks)
	if left, _ := os.ReadDir(snapDir); len(left) != 0 {
		t.Fatalf("the refused hibernate left %v", left)
	}
	h.memJob("small", 64, 16)
	if _, err := h.client().Hibernate(ctxT(t), api.HibernateParams{Name: "small"}); err != nil {
		t.Fatalf("a hibernate within the floor: %v", err)
	}
}

// TestFailedRestoreKeepsSnapshot makes CRIU's restore fail (the log path
// it must reopen is a directory now): the process stays hibernated, the
// snapshot is untouched, and once the obstacle is gone the thaw works.
func TestFailedRestoreKeepsSnapshot(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("job", 128, 16)
	hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"})
	if err != nil {
		t.Fatal(err)
	}
	ticks := h.lastTick("job")
	dir := filepath.Join(h.cfg.Snapshots(), hr.Snapshot)
	before := treeDigest(t, dir)
	log := h.proc("job").Log
	if err := os.Rename(log, log+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(log, 0o700); err != nil {
		t.Fatal(err)
	}

	_, err = c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
	if err == nil || !strings.Contains(err.Error(), "Error (") || !strings.Contains(err.Error(), "stays hibernated") {
		t.Fatalf("thaw error %v: want CRIU's own error lines and the outcome", err)
	}
	if p := h.proc("job"); p.State != api.StateHibernated || p.Snapshot != hr.Snapshot {
		t.Fatalf("after the failed restore: %+v", p)
	}
	if after := treeDigest(t, dir); after != before {
		t.Fatalf("the snapshot changed:\n%s\n%s", before, after)
	}
	os.Remove(log)
	if err := os.Rename(log+".moved", log); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}

// treeDigest lists an image directory's files with their sizes and
// times; CRIU's logs of the last restore are not part of the image.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range ents {
		if e.Name() == "restore.log" || e.Name() == "lazy-pages.log" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %d %s\n", e.Name(), fi.Size(), fi.ModTime())
	}
	return b.String()
}

// TestHibernateAfterInitReplaced hibernates a process whose init binary
// was replaced on disk since it started (an upgrade of the daemon): CRIU
// must carry the deleted binary in the image.
func TestHibernateAfterInitReplaced(t *testing.T) {
	var init string
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		init = filepath.Join(filepath.Dir(c.StateDir), "init")
		c.InitPath = init
	})
	b, err := os.ReadFile(h.bins.Daemon)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(init, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h.memJob("job", 64, 1)
	ticks := h.lastTick("job")
	if err := os.Remove(init); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(init, b, 0o755); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
}

// TestDiskBudgetWaitsForRetiredImages: a full hibernate whose room in
// --disk-budget is held by a retired image still being removed (its
// removal yielding to a thaw in flight, held here) gets that removal
// finished instead of a refusal.
func TestDiskBudgetWaitsForRetiredImages(t *testing.T) {
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.DiskBudgetMiB = 250 })
	c := h.client()
	h.memJob("job", 0, 96) // images of about 100 MiB: one and the next one's estimate fit, two do not
	hibernateThaw := func() *api.HibernateResult {
		t.Helper()
		hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job", Full: true})
		if err != nil {
			snaps, _ := c.Snapshots(ctxT(t), api.SnapshotsParams{})
			t.Fatalf("hibernate with %d of 250 MiB used: %v", snaps.Bytes>>20, err)
		}
		if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
			t.Fatal(err)
		}
		return hr
	}
	hibernateThaw()
	defer h.d.snaps.Foreground()() // a thaw from disk in flight throughout
	hibernateThaw()                // retires the first image, whose removal now yields
	last := hibernateThaw()
	snaps, err := c.Snapshots(ctxT(t), api.SnapshotsParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps.Snapshots) != 1 || snaps.Snapshots[0].ID != last.Snapshot {
		t.Fatalf("snapshots after three full hibernates: %+v; want only %s", snaps.Snapshots, last.Snapshot)
	}
}

// TestDumpsInFlightShareTheRoom: a hibernate that fits the room above
// --disk-keep-free alone is refused while another dump in flight is to
// write the rest of it, and goes through once that one is done: dumps at
// once were each held to the same free room, and together wrote past the
// floor to ENOSPC (a red-team pass). The other dump is counted as the
// daemon counts its own (Snapshots.Writing).
func TestDumpsInFlightShareTheRoom(t *testing.T) {
	u := testutil.NewUser(t, "gsflight1", "gsflight")
	snapDir := testutil.Tmpfs(t, "dumps-in-flight", "256m")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.SnapshotDir, c.DiskKeepFree = "gsflight", snapDir, 0.5
		c.Limits.DiskFraction = 0
	})
	if _, errOut, code := h.ctlAs(u, "run", "mid", "--gpu", "0", "--", h.bins.SimJob, "--vram", "64", "--host-mem", "80", "--tick", "0.02"); code != 0 {
		t.Fatalf("run mid: %s", errOut)
	}
	h.followCount("mid", "tick 3", 1)
	done := h.d.snaps.Writing(0, 80<<20) // another dump of about as much, in flight
	_, errOut, code := h.ctlAs(u, "hibernate", "mid")
	if want := "(--disk-keep-free 0.5)"; code == 0 || !strings.Contains(errOut, want) {
		done()
		t.Fatalf("a hibernate beside a dump in flight, past the floor together: exit %d, %q; want a refusal naming %s", code, errOut, want)
	}
	done()
	if _, errOut, code := h.ctlAs(u, "hibernate", "mid"); code != 0 {
		t.Fatalf("the hibernate once the other dump is done: %s", errOut)
	}
}

// TestDumpCountsDeletedFiles: the deleted files a tree holds, which CRIU
// copies into the image beside the page server, count in what its dump
// needs: a real user's process of little memory holding two deleted files
// of 40 MiB is refused past the user's share of 64 MiB (before, a user's
// three deleted files of 250 MiB hibernated at three times their share,
// and five filled the disk: a red-team pass). With one of them closed it
// hibernates.
func TestDumpCountsDeletedFiles(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	u := testutil.NewUser(t, "gsghostb1", "gsghostb")
	snapDir := testutil.Tmpfs(t, "dump-deleted-files", "256m")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.SnapshotDir, c.DiskKeepFree = "gsghostb", snapDir, 0
		c.Limits.DiskFraction = 0.25
	})
	work := filepath.Join(testutil.ShortDir(t), "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(work, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(work, "ghosts.py")
	if err := os.WriteFile(script, []byte(`import os, signal
files = []
for i in range(2):
    p = "ghost%d" % i
    f = open(p, "wb+")
    f.write(b"g" * (40 << 20))
    f.flush()
    os.unlink(p)
    files.append(f)
def close_one(*_):
    files.pop().close()
    print("closed", flush=True)
signal.signal(signal.SIGUSR1, close_one)
print("ready", flush=True)
while True:
    signal.pause()
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(u, "run", "ghosts", "--dir", work, "--", "/usr/bin/python3", script); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("ghosts", "ready", 1)
	_, errOut, code := h.ctlAs(u, "hibernate", "ghosts")
	if code == 0 || !strings.Contains(errOut, "--user-disk-fraction") {
		t.Fatalf("a hibernate of 80 MiB of deleted files past a share of 64 MiB: exit %d, %q; want a refusal naming --user-disk-fraction", code, errOut)
	}
	if p := h.proc("ghosts"); p.State != api.StateRunning {
		t.Fatalf("the refused process is %s, want running", p.State)
	}
	if _, errOut, code := h.ctlAs(u, "kill", "--signal", "USR1", "ghosts"); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("ghosts", "closed", 1)
	if _, errOut, code := h.ctlAs(u, "hibernate", "ghosts"); code != 0 {
		t.Fatalf("the hibernate with one deleted file of 40 MiB, within the share: %s", errOut)
	}
}

// TestDumpMeasuredAgainAtItsTurn: a hibernate admitted while its tree was
// small, that waits for its owner's CRIU turn while the owner lets the
// stopped tree run on and grow past their share, is measured again when
// its turn comes and refused: before, the grown tree's size was counted in
// flight as it was, holding everyone else's room for as long as its owner
// kept its CRIU stopped (a red-team pass: every other user's hibernate
// refused for --criu-timeout).
func TestDumpMeasuredAgainAtItsTurn(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	u := testutil.NewUser(t, "gsturn1", "gsturn")
	snapDir := testutil.Tmpfs(t, "dump-measured-again", "256m")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) {
		c.Group, c.SnapshotDir, c.DiskKeepFree = "gsturn", snapDir, 0
		c.Limits.DiskFraction = 0.25 // 64 MiB
	})
	script := filepath.Join(testutil.ShortDir(t), "grow.py")
	if err := os.WriteFile(script, []byte(`import signal
held = []
def grow(*_):
    held.append(bytearray(b"x" * (100 << 20)))
    print("grown", flush=True)
signal.signal(signal.SIGUSR1, grow)
print("ready", flush=True)
while True:
    signal.pause()
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := h.ctlAs(u, "run", "grow", "--", "/usr/bin/python3", script); code != 0 {
		t.Fatal(errOut)
	}
	h.followCount("grow", "ready", 1)
	release, err := h.d.criuTurns.Take(ctxT(t), u.UID) // the owner's turn, held as by another dump of theirs
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 1)
	go func() {
		_, errOut, _ := h.ctlAs(u, "hibernate", "grow")
		answered <- errOut
	}()
	waitFor(t, func() bool { return h.proc("grow").State == api.StateHibernating })
	pid := h.proc("grow").PID
	waitFor(t, func() bool { st, err := procfs.ReadStat(pid); return err == nil && st.State == 'T' }) // stopped for its dump
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {                                              // as its owner may
		t.Fatal(err)
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	// Its supervisor, stopped with the tree, passes on no output: the growth
	// is seen in its memory.
	waitFor(t, func() bool { return residentBytes([]int{pid}) > 100<<20 })
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	release()
	if errOut := <-answered; !strings.Contains(errOut, "--user-disk-fraction") {
		t.Fatalf("the hibernate of the grown tree: %q; want a refusal naming --user-disk-fraction", errOut)
	}
}
