package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestUsersDirNeedsDelegation: a user's cgroup is used only when it is a
// cgroup2 directory the user owns with its cgroup.procs.
func TestUsersDirNeedsDelegation(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give directories away")
	}
	plain := t.TempDir()
	mine := filepath.Join(plain, "user-4242")
	if err := os.Mkdir(mine, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mine, filepath.Join(mine, "cgroup.procs")} {
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	u := NewUsers(filepath.Join(plain, "user-%U"))
	if d := u.Dir(4242, "gsrlim-unit", "abc"); d != "" {
		t.Errorf("a plain directory (not cgroup2) was taken: %s", d)
	}
	if d := u.Dir(4343, "gsrlim-unit", "abc"); d != "" {
		t.Errorf("a missing directory was taken: %s", d)
	}
	_, top := testutil.CgroupTop(t)
	dir := filepath.Join(top, "user-4242")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	u = NewUsers(filepath.Join(top, "user-%U"))
	if d := u.Dir(4242, "gsrlim-unit", "abc"); d != "" {
		t.Errorf("a root-owned cgroup was taken as user 4242's: %s", d)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if d := u.Dir(4242, "gsrlim-unit", "abc"); d != "" {
		t.Errorf("a cgroup whose cgroup.procs is root's was taken: %s", d)
	}
	if err := os.Chown(filepath.Join(dir, "cgroup.procs"), 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if d, want := u.Dir(4242, "gsrlim-unit", "abc"), filepath.Join(dir, "gpusched-abc"); d != want {
		t.Errorf("Dir = %q, want %q", d, want)
	}
	if d := u.Dir(4242, "gsrlim-unit", "../x"); d != "" {
		t.Errorf("a bad id gave %q", d)
	}
}

func TestUsersRefuseForeignPaths(t *testing.T) {
	u := NewUsers("/sys/fs/cgroup/user-%U")
	for _, dir := range []string{"/etc", "/sys/fs/cgroup/user-1/x", "relative/gpusched-a", "/sys/fs/cgroup/user-1/gpusched-a/../gpusched-b", "/sys/fs/cgroup/gpusched-a.b"} {
		if err := u.Place(dir, 1, 0); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Place(%q) = %v, want ErrInvalidID", dir, err)
		}
		if err := u.Make(dir); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Make(%q) = %v, want ErrInvalidID", dir, err)
		}
		if err := u.Remove(dir); !errors.Is(err, ErrInvalidID) {
			t.Errorf("Remove(%q) = %v, want ErrInvalidID", dir, err)
		}
	}
}

// TestUsersDirNeedsLingerForUserManager: a user manager's cgroup
// (user@UID.service) is taken only while the user lingers, since systemd
// stops it, with every process in it, when their last session ends.
func TestUsersDirNeedsLingerForUserManager(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give directories away")
	}
	_, top := testutil.CgroupTop(t)
	dir := filepath.Join(top, "user@4242.service")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs")} {
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	old := LingerDir
	LingerDir = t.TempDir()
	t.Cleanup(func() { LingerDir = old })
	u := NewUsers(filepath.Join(top, "user@%U.service"))
	if d := u.Dir(4242, "gslinger", "abc"); d != "" {
		t.Errorf("the user manager's cgroup of a user who does not linger was taken: %s", d)
	}
	if err := os.WriteFile(filepath.Join(LingerDir, "gslinger"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, want := u.Dir(4242, "gslinger", "abc"), filepath.Join(dir, "gpusched-abc"); d != want {
		t.Errorf("Dir = %q, want %q", d, want)
	}
	if d := u.Dir(4242, "../gslinger", "abc"); d != "" {
		t.Errorf("a user name with a slash was looked up: %s", d)
	}
}

// TestUsersMakeTakesOnlyACgroup: Make makes the cgroup, or takes the one
// there, and refuses a directory that is not a cgroup.
func TestUsersMakeTakesOnlyACgroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make cgroups")
	}
	plain := t.TempDir()
	if err := NewUsers(filepath.Join(plain, "user-%U")).Make(filepath.Join(plain, "gpusched-criu")); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("Make of a plain directory = %v, want fs.ErrInvalid", err)
	}
	_, top := testutil.CgroupTop(t)
	u := NewUsers(filepath.Join(top, "user-%U"))
	dir := filepath.Join(top, "gpusched-criu")
	for range 2 { // made, then found
		if err := u.Make(dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := u.Remove(dir); err != nil {
		t.Fatal(err)
	}
}
