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
	write := func(name string, n int, age time.Duration) string {
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
	for path, want := range map[string]int64{"a.log": 900, "a.log.1": 900, "c.log": 3000, ".1": 1000} {
		if n := logfile.Bytes(filepath.Join(dir, path), 0); n != want {
			t.Errorf("%s holds %d bytes, want %d (untouched)", path, n, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "b.log"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "gpusched: this log was emptied: the logs of bob's live processes held 9000 bytes, over the daemon's --max-log-bytes-per-user (4000)\n"; string(b) != want {
		t.Errorf("b.log holds %q, want %q", b, want)
	}
	reports = nil
	k.Pass()
	if len(reports) != 0 {
		t.Errorf("a second pass cut again: %+v", reports)
	}
}
