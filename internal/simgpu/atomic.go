package simgpu

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tmpMarker is part of every temporary file name, so that readers skip them.
const tmpMarker = ".tmp-"

// writeFileAtomic replaces path with data: it writes a temporary file in the
// same directory, sets perm (regardless of umask), optionally fsyncs it, and
// renames it over path. The temporary file is removed on error.
func writeFileAtomic(path string, data []byte, perm fs.FileMode, sync bool) error {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+tmpMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeAndClose(f, data, perm, sync)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func writeAndClose(f *os.File, data []byte, perm fs.FileMode, sync bool) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// isTempName reports whether name is a temporary file of writeFileAtomic.
func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, tmpMarker)
}
