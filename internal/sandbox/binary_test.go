package sandbox

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSupervisorBeside takes the slim supervisor beside the daemon only when
// nobody but root could have put it there.
func TestSupervisorBeside(t *testing.T) {
	for _, tc := range []struct {
		name  string
		make  func(t *testing.T, path string)
		taken bool
	}{
		{"absent", func(*testing.T, string) {}, false},
		{"root 0755", func(t *testing.T, p string) { write(t, p, 0o755) }, true},
		{"group-writable", func(t *testing.T, p string) { write(t, p, 0o775) }, false},
		{"not executable", func(t *testing.T, p string) { write(t, p, 0o644) }, false},
		{"owned by nobody", func(t *testing.T, p string) {
			write(t, p, 0o755)
			if err := os.Chown(p, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			daemon, slim := filepath.Join(dir, "gpuschedd"), filepath.Join(dir, BinaryName)
			tc.make(t, slim)
			got, why := SupervisorBeside(daemon)
			switch {
			case tc.taken && (got != slim || why != ""):
				t.Errorf("got %s (%q), want %s", got, why, slim)
			case !tc.taken && got != daemon:
				t.Errorf("got %s, want the daemon's own %s", got, daemon)
			case !tc.taken && tc.name != "absent" && why == "":
				t.Errorf("passed over %s without saying why", slim)
			}
		})
	}
}

func write(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}
