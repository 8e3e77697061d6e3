package testutil

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Tmpfs mounts a tmpfs of size bytes (mount's size=, mode 0700) on the
// directory name in os.TempDir()/gpusched-test-mounts and returns its
// path; t is skipped where no tmpfs can be mounted. When t ends the tmpfs
// is unmounted and the directory kept: every managed tree started
// meanwhile, by this test's daemon or by another package's test running
// at the same time, copied the mount into its mount namespace, and a
// restore of such a tree then binds the directory in its place, as it
// would have seen it, rather than leaving the mount out (docs/disktier.md,
// "A mount the tree inherited is gone from the host").
func Tmpfs(t testing.TB, name, size string) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "gpusched-test-mounts", name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}
