package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/pkg/api"
)

// lazyRestore turns on --lazy-restore, and skips where CRIU cannot do it.
func lazyRestore(c *config.Config) { c.LazyRestore = true }

// requirePageSource skips where CRIU cannot take a restore's pages from
// our page source, lazily or streamed (both need userfaultfd).
func requirePageSource(t *testing.T, h *ckptHarness) {
	t.Helper()
	if !h.d.criu.Lazy() && !h.d.criu.Streams() {
		t.Skip("criu check --feature uffd-noncoop fails here: no restore from our page source")
	}
}

// TestLazyThawFromDisk thaws a hibernated process with lazy pages,
// fully and then from an incremental image (its unchanged pages, in the
// parent, lazily too): the process goes on
// from where it was with every word of its memory as it was, the thaw
// says when it ran again and when all its memory was back, and the
// snapshot stays. With cuda-checkpoint (its stand-in reads the target's
// environment, which a lazy restore leaves on disk) the thaw is eager.
func TestLazyThawFromDisk(t *testing.T) {
	for _, driver := range []string{config.DriverSim, config.DriverCLI} {
		t.Run(driver, func(t *testing.T) {
			h := newDiskHarness(t, driver, lazyRestore)
			requirePageSource(t, h)
			c := h.client()
			h.memJob("job", 128, 64)
			for i, full := range []bool{true, false} {
				hr, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job", Full: full})
				if err != nil {
					t.Fatal(err)
				}
				if (hr.Parent == "") != full {
					t.Fatalf("hibernate %d: parent %q", i, hr.Parent)
				}
				ticks := h.lastTick("job")
				res, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"})
				if err != nil {
					t.Fatal(err)
				}
				lazy := res.MS["running"] > 0 && res.MS["all_memory"] >= res.MS["running"]
				if want := driver == config.DriverSim; lazy != want {
					t.Fatalf("thaw %d lazy %v, want %v: %v", i, lazy, want, res.MS)
				}
				h.verifyContinued("job", ticks)
				dir := filepath.Join(h.cfg.Snapshots(), hr.Snapshot)
				if lazy {
					var pages int
					lg, _ := os.ReadFile(filepath.Join(dir, lazypages.LogName))
					if _, err := fmt.Sscanf(string(lg), "gpusched-lazypages: %d lazy pages", &pages); err != nil || pages < 64<<20/os.Getpagesize() {
						t.Fatalf("thaw %d: the server brought in %d pages, fewer than the job's 64 MiB (%v): %s", i, pages, err, lg)
					}
				}
				if _, err := os.Stat(filepath.Join(dir, "lazy-pages.socket")); err == nil {
					t.Fatalf("thaw %d left its lazy-pages socket in %s", i, dir)
				}
				if p := h.proc("job"); p.State != api.StateRunning || p.Snapshot != hr.Snapshot {
					t.Fatalf("after thaw %d: %+v", i, p)
				}
			}
		})
	}
}

// lazyServerOf finds the lazy-pages server serving the images in dir.
func lazyServerOf(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := lazypages.ServerArgv0 + "\x00" + dir + "\x00"
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.HasPrefix(string(b), want) {
			return pid
		}
	}
	t.Fatalf("no %s serving %s", lazypages.ServerArgv0, dir)
	return 0
}

// awaitLine waits until the file at path has the line want, reading it
// again at each inotify event that it was written to.
func awaitLine(t *testing.T, path, want string) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_MODIFY); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(strings.Split(string(data), "\n"), want) {
			return
		}
		if _, err := unix.Read(fd, buf); err != nil {
			t.Fatal(err)
		}
	}
}

// imageDigest is treeDigest without what a successful thaw writes beside
// the images: its last use (meta.json) and CRIU's stats-restore.
func imageDigest(t *testing.T, dir string) string {
	var keep []string
	for _, l := range strings.Split(treeDigest(t, dir), "\n") {
		if !strings.HasPrefix(l, "meta.json ") && !strings.HasPrefix(l, "stats-restore ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
