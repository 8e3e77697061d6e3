package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestApartKeepsBesideTheRecords(t *testing.T) {
	r, err := OpenRecords(filepath.Join(t.TempDir(), "recs"))
	if err != nil {
		t.Fatal(err)
	}
	a := r.Apart("big", 64)
	if err := a.Prune(func(string) bool { return false }); err != nil {
		t.Fatalf("prune before the first put: %v", err)
	}
	if err := a.Put("k1", []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := a.Get("k1", &got); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("get: %q, %v", got, err)
	}
	if keys, _ := r.Keys(); len(keys) != 0 {
		t.Fatalf("what is kept apart shows as records: %v", keys)
	}
	if err := a.Put("long", strings.Repeat("x", 100)); err != nil {
		t.Fatal(err)
	}
	var s string
	if err := a.Get("long", &s); err == nil || !strings.Contains(err.Error(), "over 64 bytes") {
		t.Fatalf("get of a file over the bound: %v", err)
	}
	for _, bad := range []string{"", "../x", ".hidden", "a/b"} {
		if err := a.Put(bad, 1); err == nil {
			t.Errorf("put under %q: no error", bad)
		}
	}
	os.WriteFile(filepath.Join(r.Dir(), "big", "stray"), nil, 0o600)
	if err := a.Prune(func(k string) bool { return k == "k1" }); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(r.Dir(), "big"))
	if len(ents) != 1 || ents[0].Name() != "k1.json" {
		t.Fatalf("after prune: %v", ents)
	}
	a.Remove("k1")
	if err := a.Get("k1", &got); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get after remove: %v", err)
	}
}
