package checkpoint

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// committed makes a complete snapshot id holding a file of size bytes.
func committed(t *testing.T, s *Snapshots, id string, size int) SnapshotMeta {
	t.Helper()
	dir, err := s.Create(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := s.Commit(SnapshotMeta{ID: id, ProcessID: "p", CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRetire: a retired snapshot is gone from the store and from its path
// at once, its bytes count until its removal ends, and nothing of it is
// left once Wait returns.
func TestRetire(t *testing.T) {
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	old, keep := committed(t, s, "old", 1<<20), committed(t, s, "keep", 4096)
	if err := s.Retire("old"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get("old"); ok {
		t.Fatal("a retired snapshot is still listed")
	}
	if _, err := os.Stat(s.Path("old")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a retired snapshot's directory: %v", err)
	}
	if b := s.Bytes(); b != old.Bytes+keep.Bytes && b != keep.Bytes {
		t.Fatalf("Bytes %d during the removal, want %d (or %d once removed)", b, old.Bytes+keep.Bytes, keep.Bytes)
	}
	s.Wait()
	if b := s.Bytes(); b != keep.Bytes {
		t.Fatalf("Bytes %d after the removal, want %d", b, keep.Bytes)
	}
	if left, _ := os.ReadDir(filepath.Join(s.Dir(), TrashDir)); len(left) != 0 {
		t.Fatalf("the trash holds %v", left)
	}
	if err := s.Retire("old"); err != nil {
		t.Fatalf("retiring it again: %v", err)
	}
}

// TestOpenEmptiesTrash: what a daemon that died left in the trash is
// neither a snapshot nor an incomplete one, and is removed.
func TestOpenEmptiesTrash(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, TrashDir, "dead")
	if err := os.MkdirAll(left, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(left, metaFile), []byte(`{"id":"dead"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s, incomplete, err := OpenSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.List()) != 0 || len(incomplete) != 0 {
		t.Fatalf("snapshots %v, incomplete %v", s.List(), incomplete)
	}
	s.Wait()
	if _, err := os.Stat(left); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the trash's leftover: %v", err)
	}
}

// TestSnapshotsCountDumpsInFlight: what a dump in flight is expected to
// write counts in Bytes, its owner's BytesOf and InFlight until it is done,
// once however often done is called.
func TestSnapshotsCountDumpsInFlight(t *testing.T) {
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	first := s.Writing(1001, 100)
	second := s.Writing(1001, 50)
	third := s.Writing(1002, 7)
	if s.Bytes() != 157 || s.BytesOf(1001) != 150 || s.BytesOf(1002) != 7 || s.InFlight() != 157 {
		t.Fatalf("three in flight: %d, %d, %d, %d", s.Bytes(), s.BytesOf(1001), s.BytesOf(1002), s.InFlight())
	}
	first()
	first()
	third()
	if s.Bytes() != 50 || s.BytesOf(1001) != 50 || s.BytesOf(1002) != 0 || s.InFlight() != 50 {
		t.Fatalf("one left: %d, %d, %d, %d", s.Bytes(), s.BytesOf(1001), s.BytesOf(1002), s.InFlight())
	}
	second()
	if s.InFlight() != 0 {
		t.Fatalf("none left: %d", s.InFlight())
	}
	// Admit counts a dump only once fits accepts it.
	if _, err := s.Admit(1001, 10, func() error { return errors.New("no room") }); err == nil || s.InFlight() != 0 {
		t.Fatalf("a refused admission: %v, %d in flight", err, s.InFlight())
	}
	done, err := s.Admit(1001, 10, func() error { return nil })
	if err != nil || s.InFlight() != 10 {
		t.Fatalf("an admission: %v, %d in flight", err, s.InFlight())
	}
	done()
}
