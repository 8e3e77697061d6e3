package store

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestWriteFileIsAtomicAndExact(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"WriteFile": WriteFile, "Replace": Replace} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "rec.json")
			old := syscall.Umask(0)
			defer syscall.Umask(old)
			if err := write(p, []byte("one"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := write(p, []byte("two"), 0o600); err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			fi, _ := os.Stat(p)
			if string(b) != "two" || fi.Mode().Perm() != 0o600 {
				t.Fatalf("content %q mode %v", b, fi.Mode())
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Fatalf("temp files left: %v", ents)
			}
			if err := write(filepath.Join(dir, "missing", "x"), []byte("x"), 0o600); err == nil {
				t.Fatal("write into a missing dir succeeded")
			}
		})
	}
}

func TestRecords(t *testing.T) {
	r, err := OpenRecords(filepath.Join(t.TempDir(), "procs"))
	if err != nil {
		t.Fatal(err)
	}
	type rec struct{ A int }
	if err := r.Put("b", rec{2}); err != nil {
		t.Fatal(err)
	}
	r.Put("a", rec{1})
	var got rec
	if err := r.Get("a", &got); err != nil || got.A != 1 {
		t.Fatalf("get a: %+v %v", got, err)
	}
	if err := r.Get("zz", &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	os.WriteFile(filepath.Join(r.Dir(), ".a.json.tmp99"), []byte("partial"), 0o600)
	keys, _ := r.Keys()
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "b" {
		t.Fatalf("keys %v", keys)
	}
	if _, err := os.Stat(filepath.Join(r.Dir(), ".a.json.tmp99")); err == nil {
		t.Fatal("leftover temp file not cleaned")
	}
	q, err := r.Quarantine("b")
	if err != nil || filepath.Dir(q) != filepath.Join(r.Dir(), "quarantine") {
		t.Fatalf("quarantine: %q %v", q, err)
	}
	if err := r.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete("a"); err != nil {
		t.Fatalf("deleting a missing record: %v", err)
	}
	if keys, _ := r.Keys(); len(keys) != 0 {
		t.Fatalf("keys after delete %v", keys)
	}
	for _, bad := range []string{"", ".", "..", "../x", "a/b", ".hidden", "nul\x00"} {
		if err := r.Put(bad, rec{}); err == nil {
			t.Errorf("Put(%q) accepted", bad)
		}
	}
}
