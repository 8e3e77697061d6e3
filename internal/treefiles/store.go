package treefiles

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FileName is a table's file in the images directory of the dump it
// belongs to.
const FileName = "gpusched-files.json"

// ErrNone is Load's error for an images directory without a table (one
// dumped before tables were taken).
var ErrNone = errors.New("the snapshot has no record of the files its tree held")

// Save writes t into images directory dir, private to root.
func Save(dir string, t Table) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("record of the tree's files: %w", err)
	}
	if _, err = f.Write(b); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("record of the tree's files: %w", err)
	}
	return nil
}

// Load reads the table of images directory dir: ErrNone where it has
// none.
func Load(dir string) (Table, error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return Table{}, ErrNone
	}
	if err != nil {
		return Table{}, fmt.Errorf("record of the tree's files: %w", err)
	}
	var t Table
	if err := json.Unmarshal(b, &t); err != nil {
		return Table{}, fmt.Errorf("record of the tree's files: %w", err)
	}
	return t, nil
}
