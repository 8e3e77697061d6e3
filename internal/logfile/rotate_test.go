package logfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// readFiles returns the content of path+suffix for each suffix, "<missing>"
// for an absent file, and checks that each present file has mode 0600.
func readFiles(t *testing.T, path string, suffixes ...string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, s := range suffixes {
		b, err := os.ReadFile(path + s)
		if errors.Is(err, fs.ErrNotExist) {
			got[s] = "<missing>"
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got[s] = string(b)
		if fi, err := os.Stat(path + s); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", path+s, fi.Mode().Perm(), err)
		}
	}
	return got
}

func TestRotate(t *testing.T) {
	tests := []struct {
		name  string
		keep  int
		files map[string]string
		want  map[string]string
	}{
		{
			"keep 0 truncates only",
			0,
			map[string]string{"": "cur\n"},
			map[string]string{"": "", ".1": "<missing>"},
		},
		{
			"keep 1 replaces path.1",
			1,
			map[string]string{"": "cur\n", ".1": "old\n"},
			map[string]string{"": "", ".1": "cur\n", ".2": "<missing>"},
		},
		{
			"keep 3 shifts and drops the oldest",
			3,
			map[string]string{"": "c\n", ".1": "b\n", ".2": "a\n", ".3": "z\n"},
			map[string]string{"": "", ".1": "c\n", ".2": "b\n", ".3": "a\n", ".4": "<missing>"},
		},
		{
			"keep 3 with gaps",
			3,
			map[string]string{"": "c\n", ".2": "a\n"},
			map[string]string{"": "", ".1": "c\n", ".2": "<missing>", ".3": "a\n"},
		},
		{
			"missing file changes nothing",
			2,
			map[string]string{".1": "b\n"},
			map[string]string{"": "<missing>", ".1": "b\n", ".2": "<missing>"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "log")
			writeFiles(t, path, tt.files)
			if err := Rotate(path, tt.keep); err != nil {
				t.Fatal(err)
			}
			var suffixes []string
			for s := range tt.want {
				suffixes = append(suffixes, s)
			}
			got := readFiles(t, path, suffixes...)
			for s, want := range tt.want {
				if got[s] != want {
					t.Errorf("%q = %q, want %q", "log"+s, got[s], want)
				}
			}
			if tmp, _ := filepath.Glob(filepath.Join(dir, "*.tmp")); len(tmp) != 0 {
				t.Errorf("temporary files left: %v", tmp)
			}
		})
	}
}

// TestRotateUnderAppendingWriter: a descriptor opened before the rotation
// writes at the start of the truncated file, with no hole before it.
func TestRotateUnderAppendingWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	w, err := OpenAppend(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("before rotation\n"); err != nil {
		t.Fatal(err)
	}
	if err := Rotate(path, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	got := readFiles(t, path, "", ".1")
	if got[""] != "after\n" || got[".1"] != "before rotation\n" {
		t.Errorf("after rotation: log = %q, log.1 = %q", got[""], got[".1"])
	}
}

func TestEnforce(t *testing.T) {
	tests := []struct {
		name        string
		content     string
		max         int64
		wantRotated bool
	}{
		{"under", "12345\n", 10, false},
		{"at the cap", "123456789\n", 10, false},
		{"over", "1234567890\n", 10, true},
		{"no cap", "1234567890\n", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			writeFiles(t, path, map[string]string{"": tt.content})
			rotated, err := Enforce(path, tt.max, 1)
			if err != nil || rotated != tt.wantRotated {
				t.Fatalf("Enforce = %v, %v; want %v", rotated, err, tt.wantRotated)
			}
			want := map[string]string{"": tt.content, ".1": "<missing>"}
			if tt.wantRotated {
				want = map[string]string{"": "", ".1": tt.content}
			}
			got := readFiles(t, path, "", ".1")
			for s := range want {
				if got[s] != want[s] {
					t.Errorf("%q = %q, want %q", "log"+s, got[s], want[s])
				}
			}
		})
	}
}

func TestEnforceMissingFile(t *testing.T) {
	rotated, err := Enforce(filepath.Join(t.TempDir(), "log"), 1, 1)
	if err != nil || rotated {
		t.Fatalf("Enforce = %v, %v; want false, nil", rotated, err)
	}
}

func TestRotateNegativeKeep(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := Rotate(path, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Rotate: err = %v, want ErrInvalidArgument", err)
	}
	if _, err := Enforce(path, 1, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Enforce: err = %v, want ErrInvalidArgument", err)
	}
}

func TestBytesAndRemoveTakeTheRotatedCopies(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.log")
	for suffix, body := range map[string]string{"": "abc", ".1": "de", ".2": "f", ".3": "not kept"} {
		if err := os.WriteFile(path+suffix, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/passwd", path+".4"); err != nil {
		t.Fatal(err)
	}
	if n := Bytes(path, 2); n != 6 {
		t.Errorf("Bytes with 2 kept = %d, want 6 (the log and .1, .2)", n)
	}
	if n := Bytes(path, 4); n != 14 {
		t.Errorf("Bytes with 4 kept = %d, want 14 (a link counts nothing)", n)
	}
	Remove(path, 2)
	for suffix, want := range map[string]bool{"": false, ".1": false, ".2": false, ".3": true} {
		if _, err := os.Lstat(path + suffix); (err == nil) != want {
			t.Errorf("after Remove with 2 kept, %s exists: %v, want %v", suffix, err == nil, want)
		}
	}
}

// TestStaleCopiesGo: a copy a killed rotation left (NAME.log.1.N.tmp, the
// supervisor killed mid-copy by its owner) goes at the log's next rotation
// and with the log; nothing else counted it, and it stayed for good.
func TestStaleCopiesGo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job@1001.log")
	stale := path + ".1.2690207075.tmp"
	other := filepath.Join(dir, "other@1001.log.1.1.tmp")
	for _, p := range []string{path, stale, other} {
		if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Rotate(path, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale copy stays after a rotation: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Fatalf("another log's copy went: %v", err)
	}
	if err := os.WriteFile(stale, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	Remove(path, 1)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("the stale copy stays after the log is removed: %v", err)
	}
}
