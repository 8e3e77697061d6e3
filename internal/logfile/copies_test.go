package logfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestEmptyUnderAppendingWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	w, err := OpenAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("a long history\n"); err != nil {
		t.Fatal(err)
	}
	if err := Empty(path, "emptied\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	if got := readFiles(t, path, "")[""]; got != "emptied\nafter\n" {
		t.Errorf("after Empty the log holds %q, want the note, then what was written after", got)
	}
}

func TestEmptyRefusesALink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "log")); err != nil {
		t.Fatal(err)
	}
	if err := Empty(filepath.Join(dir, "log"), "x\n"); !errors.Is(err, unix.ELOOP) {
		t.Errorf("Empty of a link: %v, want ELOOP", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep me" {
		t.Errorf("the link's target holds %q", b)
	}
}

func TestAppendCopies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.log")
	for suffix, body := range map[string]string{"": "abc", ".2": "de"} {
		if err := os.WriteFile(path+suffix, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := AppendCopies(nil, path, 2)
	if len(got) != 2 || got[0].Path != path || got[0].Index != 0 || got[0].Bytes != 3 ||
		got[1].Path != path+".2" || got[1].Index != 2 || got[1].Bytes != 2 || got[1].Mod.IsZero() {
		t.Errorf("Copies = %+v, want the log (3 bytes) and .2 (2 bytes), .1 missing", got)
	}
}

// TestFollowAcrossEmpty: a follower of a log emptied under it goes on with
// the line saying so, then what is written after, even where that line is
// longer than what the follower had read.
func TestFollowAcrossEmpty(t *testing.T) {
	path, w := openLog(t)
	fw := startFollow(t, path, 0)
	appendTo(t, w, "a\nb\n")
	fw.expect(t, "a", "b")
	if err := Empty(path, "gpusched: this log was emptied\n"); err != nil {
		t.Fatal(err)
	}
	appendTo(t, w, "c\n")
	fw.expect(t, "gpusched: this log was emptied", "c")
	fw.finish(t)
}
