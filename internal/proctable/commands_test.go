package proctable

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// longCmd is a command of two 100 KiB arguments, as a caller may send.
func longCmd() []string {
	return []string{"sh", strings.Repeat("a", 100<<10), strings.Repeat("b", 100<<10)}
}

// assertKeptCut checks that r keeps cmd cut within KeptCmdBytes, and that
// the table gives it back whole.
func assertKeptCut(t *testing.T, tb *Table, r Record, cmd []string) {
	t.Helper()
	b, _ := json.Marshal(r.Cmd)
	if !r.CmdTruncated || len(b) > KeptCmdBytes || len(r.Cmd) == 0 || !strings.HasPrefix(cmd[1], r.Cmd[len(r.Cmd)-1]) {
		t.Fatalf("record keeps a command of %d bytes encoded (truncated %v), want it cut within %d", len(b), r.CmdTruncated, KeptCmdBytes)
	}
	whole, err := tb.Command(r)
	if err != nil || !slices.Equal(whole, cmd) {
		t.Fatalf("Command: %d arguments, %v; want the whole command back", len(whole), err)
	}
}

// recordFileBytes is the size of r's record file.
func recordFileBytes(t *testing.T, dir string, r Record) int64 {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, r.ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestLongCommandKeptCutWholeApart(t *testing.T) {
	tb, st, _ := newTable(t)
	r := rec("long", api.StateRunning)
	r.Cmd = longCmd()
	got, err := tb.Create(r)
	if err != nil {
		t.Fatal(err)
	}
	assertKeptCut(t, tb, got, longCmd())
	if v, _ := tb.Get(Key{Name: "long"}); !slices.Equal(v.Cmd, got.Cmd) || !v.CmdTruncated {
		t.Fatalf("the snapshot's record differs from Create's: %d arguments, truncated %v", len(v.Cmd), v.CmdTruncated)
	}
	if n := recordFileBytes(t, st.Dir(), got); n > 2*KeptCmdBytes {
		t.Fatalf("record file is %d bytes: it holds the whole command", n)
	}
	// Each change rewrites the record, not the command.
	upd, err := tb.Update(Key{Name: "long"}, func(r *Record) error { r.PID = 7; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if n := recordFileBytes(t, st.Dir(), upd); n > 2*KeptCmdBytes {
		t.Fatalf("record file after an update is %d bytes", n)
	}
	again := New(st, nil)
	if _, err := again.Load(); err != nil {
		t.Fatal(err)
	}
	loaded, _ := again.Get(Key{Name: "long"})
	assertKeptCut(t, again, loaded, longCmd())

	short := rec("short", api.StateRunning)
	if got, _ := tb.Create(short); got.CmdTruncated || !slices.Equal(got.Cmd, short.Cmd) {
		t.Fatalf("a short command: %q truncated %v, want it kept as it is", got.Cmd, got.CmdTruncated)
	}
	if whole, err := tb.Command(short); err != nil || !slices.Equal(whole, short.Cmd) {
		t.Fatalf("Command of a short one: %q, %v", whole, err)
	}
}

func TestRemovedRecordsTakeTheirCommands(t *testing.T) {
	tb, st, _ := newTable(t)
	cmds := filepath.Join(st.Dir(), commandsDir)
	names := []string{"by-remove", "by-all-1", "by-all-2", "by-create"}
	for _, name := range names {
		r := rec(name, api.StateExited)
		r.Cmd = longCmd()
		if _, err := tb.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	if n := countFiles(t, cmds); n != 4 {
		t.Fatalf("%d commands kept apart, want 4", n)
	}
	if _, err := tb.Remove(Key{Name: "by-remove"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, failed, err := tb.RemoveAll([]Key{{Name: "by-all-1"}, {Name: "by-all-2"}}, Removal{}); err != nil || len(failed) > 0 {
		t.Fatal(failed, err)
	}
	if _, err := tb.Create(rec("by-create", api.StateRunning)); err != nil { // takes over the exited one's name
		t.Fatal(err)
	}
	if n := countFiles(t, cmds); n != 0 {
		t.Fatalf("%d commands left after their records were removed", n)
	}
}

func TestLoadMovesAnOldWholeCommandApartAndDropsStrays(t *testing.T) {
	tb, st, _ := newTable(t)
	old := rec("old", api.StateExited)
	old.Cmd = longCmd()
	if err := st.Put(old.ID, old); err != nil { // as written before records kept commands cut
		t.Fatal(err)
	}
	cmds := filepath.Join(st.Dir(), commandsDir)
	os.MkdirAll(cmds, 0o700)
	os.WriteFile(filepath.Join(cmds, "stray.json"), []byte(`["left","by","a","crash"]`), 0o600)
	if _, err := tb.Load(); err != nil {
		t.Fatal(err)
	}
	got, _ := tb.Get(Key{Name: "old"})
	assertKeptCut(t, tb, got, longCmd())
	if n := recordFileBytes(t, st.Dir(), got); n > 2*KeptCmdBytes {
		t.Fatalf("the old record's file is still %d bytes", n)
	}
	if _, err := os.Stat(filepath.Join(cmds, "stray.json")); !os.IsNotExist(err) {
		t.Fatalf("a command without a record was kept (%v)", err)
	}
}

func TestCommandOfARecordWithoutItsFile(t *testing.T) {
	tb, st, _ := newTable(t)
	r := rec("lost", api.StateExited)
	r.Cmd = longCmd()
	got, err := tb.Create(r)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(st.Dir(), commandsDir, got.ID+".json"))
	if _, err := tb.Command(got); err == nil || !strings.Contains(err.Error(), got.ID) {
		t.Fatalf("Command with its file gone: %v, want an error naming the record", err)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(ents)
}
