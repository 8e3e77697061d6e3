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

// TestSnapshotOverfullProcs: a user's directory is theirs to fill; past
// maxProcEntries entries, having listed no more than that, a snapshot
// ignores that user's records and says so, and still counts the others.
func TestSnapshotOverfullProcs(t *testing.T) {
	reg := newTestRegistry(t, 1, 1024)
	pid, st := self(t)
	if err := reg.Allocate(pid, st, DeviceUUID(0), 10); err != nil {
		t.Fatal(err)
	}
	procs := reg.userDir(0)
	first := filepath.Join(procs, "junk")
	if err := os.WriteFile(first, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range maxProcEntries - 2 {
		if err := os.Link(first, filepath.Join(procs, "junk"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	if snap := snapshot(t, reg); usedOn(snap, DeviceUUID(0)) != 10 || len(snap.Untrusted) != 0 {
		t.Fatalf("snapshot with %d entries: %+v", maxProcEntries, snap)
	}
	if err := os.Link(first, filepath.Join(procs, "one-more")); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, reg)
	if usedOn(snap, DeviceUUID(0)) != 0 || len(snap.Untrusted) != 1 || !strings.Contains(snap.Untrusted[0], "over") {
		t.Fatalf("snapshot with %d entries: %+v, want procs/0 ignored and said so", maxProcEntries+1, snap)
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

// TestUsedSaturates: forged usages whose sum passes 2^64 count as all of
// it, not wrapped round to little (the allocator then handed a user
// memory another user held).
func TestUsedSaturates(t *testing.T) {
	s := newScanResult()
	uuid := DeviceUUID(0)
	s.live[1] = record{Usage: map[string]uint64{uuid: 1<<64 - 1}}
	s.live[2] = record{Usage: map[string]uint64{uuid: 1<<64 - 20000 + 1}}
	if got := s.used(uuid); got != 1<<64-1 {
		t.Fatalf("used %d, want 2^64-1", got)
	}
}

// TestRecordOfManyLinksIsRefusedUnread: a record file with more than one
// link is a user's copy (the daemon writes each whole and renames it into
// place), refused from its metadata: thousands of links to one large file
// had each scan read every one.
func TestRecordOfManyLinksIsRefusedUnread(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "1.json")
	if err := os.WriteFile(path, []byte(`{"pid":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readRecord(path); err != nil {
		t.Fatalf("a record of one link: %v", err)
	}
	if err := os.Link(path, filepath.Join(dir, "2.json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readRecord(path); !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "2 links") {
		t.Fatalf("a record of two links: %v", err)
	}
}
