package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSumsTellChangedImages: images changed, added or removed since their
// sums were written fail the check; memory pages, logs and the store's
// metadata may change; images without sums pass.
func TestSumsTellChangedImages(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("core-9.img", "uid 1018")
	write("files.img", "f")
	write("pages-1.img", "memory")
	write("gpusched-files.json", "{}")
	if err := checkSums(dir); err != nil {
		t.Fatalf("images without sums: %v", err)
	}
	if err := writeSums(dir); err != nil {
		t.Fatal(err)
	}
	write("pages-1.img", "other memory")
	write("restore.log", "log")
	write(metaFile, "{}")
	if err := checkSums(dir); err != nil {
		t.Fatalf("pages, a log and the metadata changed: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func()
	}{
		{"credentials rewritten", func() { write("core-9.img", "uid 0000") }},
		{"record rewritten", func() { write("gpusched-files.json", `{"procs":{}}`) }},
		{"image added", func() { write("creds-9.img", "x") }},
		{"image removed", func() { os.Remove(filepath.Join(dir, "files.img")) }},
	} {
		if err := writeSums(dir); err != nil {
			t.Fatal(err)
		}
		tc.change()
		if err := checkSums(dir); !errors.Is(err, ErrImagesChanged) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
