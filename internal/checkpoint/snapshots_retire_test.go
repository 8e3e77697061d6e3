package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// retiredFile retires a snapshot holding a pages image of three removal
// steps and returns the image's path in the trash.
func retiredFile(t *testing.T, s *Snapshots) string {
	t.Helper()
	committed(t, s, "old", 3*retireStep)
	if err := s.Retire("old"); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(s.Dir(), TrashDir, "old", "pages-1.img")
}

// awaitYield makes the next removal step that finds Foreground work tell
// the returned channel, and that step wait as long as the test runs.
func awaitYield(t *testing.T) <-chan struct{} {
	t.Helper()
	yielding := make(chan struct{}, 1)
	oldYield := retireYield
	retireYield = time.Hour
	yieldHook = func() {
		select {
		case yielding <- struct{}{}:
		default:
		}
	}
	t.Cleanup(func() { retireYield, yieldHook = oldYield, nil })
	return yielding
}

// awaitStep waits until a removal step waits for the foreground work.
func awaitStep(t *testing.T, yielding <-chan struct{}) {
	t.Helper()
	select {
	case <-yielding:
	case <-time.After(30 * time.Second):
		t.Fatal("the removal did not wait for the foreground work")
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestRetireYieldsToForeground: while a dump or restore runs, the removal
// of a retired image frees nothing; it goes on once the work ends.
func TestRetireYieldsToForeground(t *testing.T) {
	yielding := awaitYield(t)
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	done := s.Foreground()
	img := retiredFile(t, s)
	awaitStep(t, yielding)
	if n := fileSize(t, img); n != 3*retireStep {
		t.Fatalf("the retired image holds %d bytes while foreground work runs, want all %d", n, 3*retireStep)
	}
	if b := s.Bytes(); b < 3*retireStep {
		t.Fatalf("Bytes %d while the image waits for its removal", b)
	}
	done()
	s.Wait()
	if _, err := os.Stat(filepath.Dir(img)); !os.IsNotExist(err) {
		t.Fatalf("the retired snapshot after its removal: %v", err)
	}
	if b := s.Bytes(); b != 0 {
		t.Fatalf("Bytes %d after the removal", b)
	}
}

// TestReclaimDoesNotYield: a caller that needs the space (a dump over the
// disk budget) gets the trash removed while foreground work still runs.
func TestReclaimDoesNotYield(t *testing.T) {
	yielding := awaitYield(t)
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Foreground()()
	img := retiredFile(t, s)
	awaitStep(t, yielding)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Reclaim(ctx); err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(img)); !os.IsNotExist(err) {
		t.Fatalf("the retired snapshot after Reclaim: %v", err)
	}
	if b := s.Bytes(); b != 0 {
		t.Fatalf("Bytes %d after Reclaim", b)
	}
}

// TestStopLeavesTrashForNextOpen: a stopping daemon does not wait for the
// trash; the next OpenSnapshots removes what is left.
func TestStopLeavesTrashForNextOpen(t *testing.T) {
	yielding := awaitYield(t)
	dir := t.TempDir()
	s, _, err := OpenSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Foreground()()
	img := retiredFile(t, s)
	awaitStep(t, yielding)
	s.Stop()
	if n := fileSize(t, img); n != 3*retireStep {
		t.Fatalf("the retired image holds %d bytes after Stop, want all %d", n, 3*retireStep)
	}
	retireYield, yieldHook = time.Second, nil
	s2, _, err := OpenSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2.Wait()
	if _, err := os.Stat(filepath.Dir(img)); !os.IsNotExist(err) {
		t.Fatalf("the trash after the next open: %v", err)
	}
}

// TestRetireShrinksOnlyItsOwnFiles: the removal truncates the snapshot
// directory's own files, never what a link in it points at.
func TestRetireShrinksOnlyItsOwnFiles(t *testing.T) {
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(outside, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	committed(t, s, "old", retireStep+1)
	if err := os.Symlink(outside, filepath.Join(s.Path("old"), "pages-2.img")); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire("old"); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	if b, err := os.ReadFile(outside); err != nil || string(b) != "keep me" {
		t.Fatalf("the file a link in the snapshot pointed at: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), TrashDir, "old")); !os.IsNotExist(err) {
		t.Fatalf("the retired snapshot after its removal: %v", err)
	}
}

// TestRetireSparseImageInFewSteps: the steps of a removal follow what a
// file holds on disk, not its length, so a sparse file of a terabyte
// does not hold the remover for a million truncates.
func TestRetireSparseImageInFewSteps(t *testing.T) {
	steps := 0
	oldYield := retireYield
	retireYield, yieldHook = 0, func() { steps++ }
	t.Cleanup(func() { retireYield, yieldHook = oldYield, nil })
	s, _, err := OpenSnapshots(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Foreground()() // every step calls the hook
	committed(t, s, "old", 4096)
	if err := os.Truncate(filepath.Join(s.Path("old"), "pages-1.img"), 1<<40); err != nil {
		t.Fatal(err)
	}
	if err := s.Retire("old"); err != nil {
		t.Fatal(err)
	}
	s.Wait()
	if steps > 2 {
		t.Fatalf("%d steps to remove a sparse file holding 4 KiB", steps)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), TrashDir, "old")); !os.IsNotExist(err) {
		t.Fatalf("the retired snapshot after its removal: %v", err)
	}
}
