package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKdatDir: the owners' kdat directory is used only as a directory of
// root's, that only root may enter, on a tmpfs; one made by someone else
// first, or a link to one, never is.
func TestKdatDir(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "kdat-test")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	mkdir := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(shm, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(shm, "link")
	if err := os.Symlink(mkdir("target", 0o700, 0), link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, refusal string
	}{
		{filepath.Join(shm, "new"), ""},
		{mkdir("made", 0o700, 0), ""},
		{mkdir("open", 0o755, 0), "only root may enter"},
		{mkdir("users", 0o700, 65534), "only root may enter"},
		{mkdir("sticky", os.ModeSticky|0o700, 0), "only root may enter"},
		{link, "only root may enter"},
		{filepath.Join(t.TempDir(), "disk"), "not on a tmpfs"},
	} {
		if c.refusal == "not on a tmpfs" && onTmpfs(filepath.Dir(c.dir)) {
			continue // this machine's temporary directory is a tmpfs
		}
		err := kdatDir(c.dir)
		if c.refusal == "" && err != nil || c.refusal != "" && (err == nil || !strings.Contains(err.Error(), c.refusal)) {
			t.Errorf("kdatDir(%s) = %v, want %q", filepath.Base(c.dir), err, c.refusal)
		}
	}
	if fi, err := os.Stat(filepath.Join(shm, "new")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the new directory: %v %v", fi, err)
	}
}

func onTmpfs(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
