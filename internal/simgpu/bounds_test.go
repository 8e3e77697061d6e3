package simgpu

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestSnapshotOverfullProcs: procs/ is anyone's to fill; past
// maxProcEntries entries a snapshot fails, having listed no more than that.
func TestSnapshotOverfullProcs(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	procs := filepath.Join(reg.Dir(), procsName)
	first := filepath.Join(procs, "junk")
	if err := os.WriteFile(first, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range maxProcEntries - 1 {
		if err := os.Link(first, filepath.Join(procs, "junk"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.Snapshot(); err != nil {
		t.Fatalf("Snapshot with %d entries: %v", maxProcEntries, err)
	}
	if err := os.Link(first, filepath.Join(procs, "one-more")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Snapshot(); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Fatalf("Snapshot with %d entries = %v, want an error", maxProcEntries+1, err)
	}
}

// TestSnapshotRefusesSpecialFiles: a FIFO or a symlink in place of a state
// file fails a snapshot instead of blocking it or reading elsewhere.
func TestSnapshotRefusesSpecialFiles(t *testing.T) {
	for _, name := range []string{metricsName, faultsName} {
		t.Run(name, func(t *testing.T) {
			reg := newTestRegistry(t, 1, 1024)
			path := filepath.Join(reg.Dir(), name)
			if err := unix.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := reg.Snapshot()
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("Snapshot read a FIFO")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Snapshot blocked on a FIFO")
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Snapshot(); !errors.Is(err, unix.ELOOP) {
				t.Fatalf("Snapshot through a symlink = %v, want ELOOP", err)
			}
		})
	}
}
