package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Apart holds what records keep apart from themselves because it is large
// and rarely read (a whole command): one file per record key in a
// directory beside the records, created at the first Put. A value is
// written before the record that says it is kept apart and removed after
// that record; Prune drops what a crash left without one.
type Apart struct {
	dir string
	max int64 // bytes Get reads at most
}

// Apart is r's directory of values kept apart, named name, whose files
// Get reads up to max bytes of.
func (r *Records) Apart(name string, max int64) *Apart {
	return &Apart{dir: filepath.Join(r.dir, name), max: max}
}

func (a *Apart) path(key string) (string, error) {
	if !validKey(key) {
		return "", fmt.Errorf("kept apart: key %q: invalid", key)
	}
	return filepath.Join(a.dir, key+ext), nil
}

// Put stores v under key, atomically and durably.
func (a *Apart) Put(key string, v any) error {
	p, err := a.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(a.dir, 0o700); err != nil {
		return fmt.Errorf("kept apart for %s: %w", key, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("kept apart for %s: %w", key, err)
	}
	return WriteFile(p, b, 0o600)
}

// Get decodes what is kept under key into v.
func (a *Apart) Get(key string, v any) error {
	p, err := a.path(key)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("kept apart for %s: %w", key, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, a.max+1))
	switch {
	case err != nil:
		return fmt.Errorf("kept apart for %s: %w", key, err)
	case int64(len(b)) > a.max:
		return fmt.Errorf("kept apart for %s: over %d bytes", key, a.max)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("kept apart for %s: %w", key, err)
	}
	return nil
}

// Remove deletes what is kept under key, if anything, without syncing the
// directory: what a crash brings back, Prune drops.
func (a *Apart) Remove(key string) {
	if p, err := a.path(key); err == nil {
		os.Remove(p)
	}
}

// Prune removes what is kept under each key that keep refuses, and any
// other file.
func (a *Apart) Prune(keep func(key string) bool) error {
	ents, err := os.ReadDir(a.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kept apart %s: %w", a.dir, err)
	}
	for _, e := range ents {
		if key, ok := strings.CutSuffix(e.Name(), ext); !ok || !keep(key) {
			os.Remove(filepath.Join(a.dir, e.Name()))
		}
	}
	return nil
}
