package logfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// watchCount is how many inotify watches w holds (the wd lines of its
// fdinfo).
func watchCount(t *testing.T, w *Watcher) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", w.fd))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "inotify wd:")
}

// TestWatcherShared: more followers than root has inotify instances, of
// two files, share one instance, made at the first follow, and one watch
// per file; each is woken by its own file's writes, and the watches go
// with the last follower.
func TestWatcherShared(t *testing.T) {
	w := testWatcher(t)
	if got := testutil.InotifyInstances(t); got != 0 {
		t.Errorf("a watcher nobody follows through holds %d inotify instances, want 0", got)
	}
	pathA, wa := openLog(t)
	pathB, wb := openLog(t)
	n := testutil.InotifyLimit(t) + 8
	fws := make([]*following, n)
	for i := range fws {
		fws[i] = startFollowWith(t, w, []string{pathA, pathB}[i%2], 0)
	}
	appendTo(t, wa, "a1\n")
	appendTo(t, wb, "b1\n")
	for i, fw := range fws {
		fw.expect(t, []string{"a1", "b1"}[i%2]) // read after subscribing
	}
	if got := testutil.InotifyInstances(t); got != 1 {
		t.Errorf("%d followers hold %d inotify instances, want 1", n, got)
	}
	if got := watchCount(t, w); got != 2 {
		t.Errorf("%d followers of 2 files hold %d watches, want 2", n, got)
	}
	appendTo(t, wa, "a2\n")
	appendTo(t, wb, "b2\n")
	for i, fw := range fws {
		fw.expect(t, []string{"a2", "b2"}[i%2])
	}
	for _, fw := range fws[:n-2] {
		fw.finish(t)
	}
	if got := watchCount(t, w); got != 2 {
		t.Errorf("the last follower of each file gone, %d watches, want 2", got)
	}
	appendTo(t, wa, "a3\n")
	fws[n-2].expect(t, "a3")
	fws[n-2].finish(t)
	fws[n-1].finish(t)
	if got := watchCount(t, w); got != 0 {
		t.Errorf("no follower left, %d watches, want 0", got)
	}
}

// TestWatcherClosed: a follower whose watcher closes returns an error.
func TestWatcherClosed(t *testing.T) {
	w := NewWatcher()
	path, log := openLog(t)
	fw := startFollowWith(t, w, path, 0)
	appendTo(t, log, "x\n")
	fw.expect(t, "x")
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fw.end(t); !errors.Is(err, errWatchEnded) {
		t.Errorf("Follow = %v, want errWatchEnded", err)
	}
	if err := Follow(t.Context(), w, path, 0, nil, lineFunc(func(string) error { return nil })); !errors.Is(err, errWatchEnded) {
		t.Errorf("Follow after Close = %v, want errWatchEnded", err)
	}
}
