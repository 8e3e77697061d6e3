package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestThawAfterInheritedMountpointRemoved hibernates a tree that inherited
// a host mount, then unmounts it and removes its mountpoint, as logging
// out does to /run/user/<uid>: the thaw restores the tree without that
// mount, memory intact, and says so on the process. It runs in a mount
// namespace of its own: a CRIU dump by another package's test running
// meanwhile records the mount, and its restore then fails on the removed
// mountpoint ("Can't stat mountpoint", internal/checkpoint's
// TestCRIULeaveRunningAndTwoCopies in CI at 05618eb).
func TestThawAfterInheritedMountpointRemoved(t *testing.T) {
	if !testutil.InOwnMountNamespace(t) {
		return
	}
	base := t.TempDir()
	dir := filepath.Join(base, "user")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	h := newDiskHarness(t, config.DriverSim)
	c := h.client()
	h.memJob("job", 128, 16)
	if _, err := c.Hibernate(ctxT(t), api.HibernateParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	ticks := h.lastTick("job")
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Thaw(ctxT(t), api.ThawParams{Name: "job"}); err != nil {
		t.Fatal(err)
	}
	h.verifyContinued("job", ticks)
	if p := h.proc("job"); !strings.Contains(p.Note, dir) {
		t.Errorf("note %q does not name the mount left out", p.Note)
	}
}
