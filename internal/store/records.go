package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotFound is returned for a key with no record.
var ErrNotFound = errors.New("record not found")

const (
	ext           = ".json"
	quarantineDir = "quarantine"
)

// Records is a directory of JSON records, one file per key, mode 0600.
type Records struct {
	dir string
}

// OpenRecords creates dir (0700) when needed.
func OpenRecords(dir string) (*Records, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	return &Records{dir: dir}, nil
}

// Dir is the directory holding the records.
func (r *Records) Dir() string { return r.dir }

func (r *Records) path(key string) (string, error) {
	if !validKey(key) {
		return "", fmt.Errorf("record key %q: invalid", key)
	}
	return filepath.Join(r.dir, key+ext), nil
}

// validKey reports whether key names a file of its own in a directory.
func validKey(key string) bool {
	return key != "" && !strings.ContainsAny(key, "/\x00") && !strings.HasPrefix(key, ".")
}

// Put stores v under key, atomically and durably (WriteFile).
func (r *Records) Put(key string, v any) error {
	return r.put(key, v, WriteFile)
}

// PutVolatile stores v under key atomically but without syncing (Replace):
// for a change that a machine crash would make moot.
func (r *Records) PutVolatile(key string, v any) error {
	return r.put(key, v, Replace)
}

func (r *Records) put(key string, v any, write func(string, []byte, os.FileMode) error) error {
	p, err := r.path(key)
	if err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	return write(p, append(b, '\n'), 0o600)
}

// Get decodes the record under key into v.
func (r *Records) Get(key string, v any) error {
	p, err := r.path(key)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("record %s: %w", key, ErrNotFound)
		}
		return fmt.Errorf("record %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	return nil
}

// Delete removes the record under key; a missing record is not an error.
func (r *Records) Delete(key string) error {
	if err := r.DeleteVolatile(key); err != nil {
		return err
	}
	return r.Sync()
}

// DeleteVolatile removes the record under key without syncing the
// directory: for batches, made durable together by one Sync.
func (r *Records) DeleteVolatile(key string) error {
	p, err := r.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("record %s: %w", key, err)
	}
	return nil
}

// Sync makes the directory's changes (deletions, renames) durable.
func (r *Records) Sync() error { return SyncDir(r.dir) }

// Keys lists the stored keys, sorted. Leftover temp files are removed.
func (r *Records) Keys() ([]string, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, fmt.Errorf("state dir %s: %w", r.dir, err)
	}
	keys := []string{}
	for _, e := range ents {
		n := e.Name()
		switch {
		case e.IsDir():
		case IsTemp(n):
			os.Remove(filepath.Join(r.dir, n))
		case strings.HasSuffix(n, ext):
			keys = append(keys, strings.TrimSuffix(n, ext))
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Quarantine moves a bad record aside (into quarantine/, with a timestamp)
// so it no longer loads but is kept for inspection.
func (r *Records) Quarantine(key string) (string, error) {
	p, err := r.path(key)
	if err != nil {
		return "", err
	}
	qdir := filepath.Join(r.dir, quarantineDir)
	if err := os.MkdirAll(qdir, 0o700); err != nil {
		return "", err
	}
	dst := filepath.Join(qdir, fmt.Sprintf("%s.%d%s", key, time.Now().UnixNano(), ext))
	if err := os.Rename(p, dst); err != nil {
		return "", fmt.Errorf("quarantine record %s: %w", key, err)
	}
	return dst, SyncDir(r.dir)
}

// PutAll stores every vals[i] under keys[i], each atomically, and makes
// them durable together with one filesystem sync: for batches, where a sync
// per record would dominate. On error the records written are deleted.
func (r *Records) PutAll(keys []string, vals []any) error {
	if len(keys) != len(vals) {
		return fmt.Errorf("put all: %d keys for %d records", len(keys), len(vals))
	}
	for i, key := range keys {
		if err := r.PutVolatile(key, vals[i]); err != nil {
			for _, k := range keys[:i] {
				r.Delete(k)
			}
			return err
		}
	}
	d, err := os.Open(r.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Syncfs(int(d.Fd())); err != nil {
		for _, k := range keys {
			r.Delete(k)
		}
		return fmt.Errorf("sync %s: %w", r.dir, err)
	}
	return nil
}
