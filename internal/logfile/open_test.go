package logfile

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenAppend(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log")
	// An existing, wider file is narrowed to 0600.
	writeFiles(t, path, map[string]string{"": "kept\n"})
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil || fl&unix.O_APPEND == 0 || fl&unix.O_ACCMODE != unix.O_WRONLY {
		t.Errorf("status flags = %#x (%v), want write-only append", fl, err)
	}
	fd, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0)
	if err != nil || fd&unix.FD_CLOEXEC == 0 {
		t.Errorf("fd flags = %#x (%v), want close-on-exec", fd, err)
	}
	if _, err := f.WriteString("more\n"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "kept\nmore\n" {
		t.Errorf("content = %q", b)
	}
}

func TestOpenAppendRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	link := filepath.Join(dir, "log")
	writeFiles(t, target, map[string]string{"": ""})
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAppend(link); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("err = %v, want ELOOP", err)
	}
}
