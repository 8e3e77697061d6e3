package procfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	content := bytes.Repeat([]byte("0123456789"), 10)
	whole := write("whole", content)
	if b, err := ReadFile(whole, len(content)); err != nil || !bytes.Equal(b, content) {
		t.Errorf("ReadFile(whole, len) = %d bytes, %v; want all, nil", len(b), err)
	}
	if b, err := ReadFile(whole, len(content)-1); !errors.Is(err, ErrTruncated) || !bytes.Equal(b, content[:len(content)-1]) {
		t.Errorf("ReadFile(whole, len-1) = %d bytes, %v; want len-1, ErrTruncated", len(b), err)
	}

	// A hole of 1 GiB costs a read of the limit.
	huge := write("huge", nil)
	if err := os.Truncate(huge, 1<<30); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(huge, MaxStatus); !errors.Is(err, ErrTruncated) || len(b) != MaxStatus {
		t.Errorf("ReadFile(huge) = %d bytes, %v; want %d, ErrTruncated", len(b), err, MaxStatus)
	}

	link := filepath.Join(dir, "link")
	if err := os.Symlink(whole, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(link, 1<<10); !errors.Is(err, unix.ELOOP) {
		t.Errorf("ReadFile(symlink) = %v, want ELOOP", err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// Without a writer, opening a FIFO would block a plain reader forever.
	for _, p := range []string{fifo, "/dev/zero", dir} {
		if _, err := ReadFile(p, 1<<10); err == nil {
			t.Errorf("ReadFile(%s) read it, want an error", p)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing"), 1<<10); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}

// TestReadFileProc: the files the daemon reads fit their limits.
func TestReadFileProc(t *testing.T) {
	self := "/proc/" + strconv.Itoa(os.Getpid())
	for _, f := range []struct {
		path  string
		limit int
	}{
		{self + "/stat", MaxNumbers},
		{self + "/statm", MaxNumbers},
		{self + "/status", MaxStatus},
		{self + "/cmdline", MaxArgs},
		{"/proc/sys/kernel/random/boot_id", MaxNumbers},
	} {
		if b, err := ReadFile(f.path, f.limit); err != nil || len(b) == 0 {
			t.Errorf("ReadFile(%s) = %d bytes, %v", f.path, len(b), err)
		}
	}
}
