package logfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Rotate shifts path.(keep-1) … path.1 to path.keep … path.2 (dropping the
// old path.keep), copies path to path.1 (mode 0600, synced) and truncates path
// to zero in place, so that a process appending to it carries on at offset 0.
// With keep 0 it only truncates. Missing files are skipped; a missing path
// leaves everything as it is. Calls for one path must not overlap.
func Rotate(path string, keep int) error {
	if err := checkKeep(path, keep); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	defer f.Close()
	if keep > 0 {
		for i := keep - 1; i >= 1; i-- {
			err := os.Rename(rotatedPath(path, i), rotatedPath(path, i+1))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("log %s: %w", path, err)
			}
		}
		if err := copyFile(f, rotatedPath(path, 1)); err != nil {
			return fmt.Errorf("log %s: %w", path, err)
		}
	}
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	return nil
}

// Enforce rotates path (see Rotate) when it holds more than maxBytes, and
// reports whether it did. A maxBytes of zero or less means no cap; a missing
// file is not rotated.
func Enforce(path string, maxBytes int64, keep int) (rotated bool, err error) {
	if err := checkKeep(path, keep); err != nil {
		return false, err
	}
	if maxBytes <= 0 {
		return false, nil
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("log %s: %w", path, err)
	}
	if fi.Size() <= maxBytes {
		return false, nil
	}
	if err := Rotate(path, keep); err != nil {
		return false, err
	}
	return true, nil
}

// copyFile copies src, from its start to its end at the time of copying, to
// a new file at dst, replacing dst atomically and durably. What an earlier
// copy to dst left (its writer killed mid-copy) goes first.
func copyFile(src *os.File, dst string) error {
	dir := filepath.Dir(dst)
	removeCopies(dst)
	tmp, err := os.CreateTemp(dir, filepath.Base(dst)+copyPattern) // mode 0600
	if err != nil {
		return err
	}
	if err := fill(tmp, src); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// fill copies src into tmp, then syncs and closes tmp.
func fill(tmp, src *os.File) error {
	_, err := io.Copy(tmp, src)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	return err
}

// rotatedPath names the i-th rotated copy of path; the 0th is path itself.
func rotatedPath(path string, i int) string {
	if i == 0 {
		return path
	}
	return path + "." + strconv.Itoa(i)
}

func checkKeep(path string, keep int) error {
	if keep < 0 {
		return fmt.Errorf("log %s: keep %d: %w", path, keep, ErrInvalidArgument)
	}
	return nil
}

// Remove deletes path and its keep rotated copies; missing ones are no
// error, nor is anything else: what is left a later Remove takes.
func Remove(path string, keep int) {
	for i := 0; i <= keep; i++ {
		os.Remove(rotatedPath(path, i))
	}
	removeCopies(rotatedPath(path, 1))
}

// copyPattern names copyFile's temporary copies, after their
// destination's name.
const copyPattern = ".*.tmp"

// removeCopies removes the temporary copies to dst that copyFile left
// (its writer, the tree's supervisor, killed mid-copy: its owner may).
func removeCopies(dst string) {
	stale, _ := filepath.Glob(dst + copyPattern)
	for _, p := range stale {
		os.Remove(p)
	}
}
