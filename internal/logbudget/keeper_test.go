package logbudget

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/logfile"
)

// TestPassCutsEachUserApart writes the logs of two users' live processes,
// one user's within the budget and the other's past it, and checks that a
// pass removes the second user's rotated copies, then empties their largest
// log with a line saying why, and leaves the first user's alone.
func TestPassCutsEachUserApart(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int, age time.Duration) string { return writeLog(t, dir, name, n, age) }
	write("a.log", 900, 0)
	write("a.log.1", 900, time.Hour)
	write("b.log", 4000, 0)
	write("b.log.1", 1000, 2*time.Hour)
	write("c.log", 3000, 0)
	write("c.log.1", 1000, time.Hour)
	write(".1", 1000, 3*time.Hour) // what a log with no path would name in the daemon's directory
	t.Chdir(dir)
	logs := []Log{
		{UID: 1000, User: "alice", Name: "a", Path: filepath.Join(dir, "a.log")},
		{UID: 1001, User: "bob", Name: "b", Path: filepath.Join(dir, "b.log")},
		{UID: 1001, User: "bob", Name: "c", Path: filepath.Join(dir, "c.log")},
		{UID: 1001, User: "bob", Name: "no-log"}, // nothing relative to the daemon's directory
	}
	var reports []Report
	k := Keeper{Budget: 4000, Keep: 1, Setting: "--max-log-bytes-per-user",
		Live: func() []Log { return logs }, Reports: func(r Report) { reports = append(reports, r) }}
	k.Pass()

	if len(reports) != 1 {
		t.Fatalf("reports %+v, want one, bob's", reports)
	}
	r := reports[0]
	wantRemoved := []string{filepath.Join(dir, "b.log.1"), filepath.Join(dir, "c.log.1")}
	if r.User != "bob" || r.Held != 9000 || !slices.Equal(r.Removed, wantRemoved) || !slices.Equal(r.Emptied, []string{"b"}) || r.Err != nil {
		t.Errorf("report %+v, want bob's 9000 bytes, %v removed, b emptied", r, wantRemoved)
	}
	wantUntouched(t, dir, map[string]int64{"a.log": 900, "a.log.1": 900, "c.log": 3000, ".1": 1000})
	wantEmptied(t, filepath.Join(dir, "b.log"), "the logs of bob's live processes held 9000 bytes, over the daemon's --max-log-bytes-per-user (4000)")
	reports = nil
	k.Pass()
	if len(reports) != 0 {
		t.Errorf("a second pass cut again: %+v", reports)
	}
}

// TestPassCutsUsersTogether: three users' live logs, each within the
// per-user budget, hold more than all may hold together. A pass cuts the
// two who hold the most to equal shares (the largest log first), each
// emptied log saying why, and leaves the one within its share alone; a
// per-user budget below the share still applies.
func TestPassCutsUsersTogether(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) string { return writeLog(t, dir, name, n, 0) }
	logs := []Log{
		{UID: 1000, User: "alice", Name: "a", Path: write("a.log", 1000)},
		{UID: 1001, User: "bob", Name: "b", Path: write("b.log", 5000)},
		{UID: 1001, User: "bob", Name: "c", Path: write("c.log", 2000)},
		{UID: 1002, User: "carol", Name: "d", Path: write("d.log", 4000)},
	}
	together := int64(7000) // a share of 3000 each for bob and carol
	var reports []Report
	k := Keeper{Budget: 10000, Keep: 1, Setting: "--max-log-bytes-per-user",
		Together: func() int64 { return together }, TogetherSetting: "--log-disk-fraction",
		Live: func() []Log { return logs }, Reports: func(r Report) { reports = append(reports, r) }}
	k.Pass()

	slices.SortFunc(reports, func(a, b Report) int { return strings.Compare(a.User, b.User) })
	if len(reports) != 2 || reports[0].User != "bob" || reports[1].User != "carol" {
		t.Fatalf("reports %+v, want bob's and carol's", reports)
	}
	for i, want := range []Report{
		{User: "bob", Held: 7000, Over: "--log-disk-fraction", Budget: 3000, Emptied: []string{"b"}},
		{User: "carol", Held: 4000, Over: "--log-disk-fraction", Budget: 3000, Emptied: []string{"d"}},
	} {
		if r := reports[i]; r.Held != want.Held || r.Over != want.Over || r.Budget != want.Budget || !slices.Equal(r.Emptied, want.Emptied) || r.Err != nil {
			t.Errorf("report %+v, want %+v", r, want)
		}
	}
	wantUntouched(t, dir, map[string]int64{"a.log": 1000, "c.log": 2000})
	wantEmptied(t, filepath.Join(dir, "b.log"), "the logs of all users' live processes held 12000 bytes, over the daemon's --log-disk-fraction (7000); bob's held 7000, cut to their share (3000)")

	// A per-user budget below the share is the one that cuts.
	write("b.log", 5000)
	reports = nil
	k.Budget, together = 4000, 100000
	k.Pass()
	if len(reports) != 1 || reports[0].User != "bob" || reports[0].Over != "--max-log-bytes-per-user" || reports[0].Budget != 4000 {
		t.Errorf("reports %+v, want bob's, over --max-log-bytes-per-user", reports)
	}
	reports = nil
	k.Pass()
	if len(reports) != 0 {
		t.Errorf("a pass within both cut again: %+v", reports)
	}
}

// writeLog writes n bytes to dir/name, last modified age ago.
func writeLog(t *testing.T, dir, name string, n int, age time.Duration) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o600); err != nil {
		t.Fatal(err)
	}
	mod := time.Now().Add(-age)
	if err := os.Chtimes(p, mod, mod); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantUntouched checks that each file in dir holds its bytes as written.
func wantUntouched(t *testing.T, dir string, sizes map[string]int64) {
	t.Helper()
	for path, want := range sizes {
		if n := logfile.Bytes(filepath.Join(dir, path), 0); n != want {
			t.Errorf("%s holds %d bytes, want %d (untouched)", path, n, want)
		}
	}
}

// wantEmptied checks that the log at path holds only the line saying why
// it was emptied.
func wantEmptied(t *testing.T, path, why string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := "gpusched: this log was emptied: " + why + "\n"; string(b) != want {
		t.Errorf("%s holds %q, want %q", filepath.Base(path), b, want)
	}
}
