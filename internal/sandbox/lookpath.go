package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// LookPath resolves a command name the way the supervisor will: a name with
// a slash is taken as a path (relative to dir), a bare name is searched in
// path, or in DefaultPath when path is empty. Permissions are those of the
// calling thread (see AsCaller).
func LookPath(name, path, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) && dir != "" {
			p = filepath.Join(dir, p)
		}
		if err := executable(p); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return name, nil
	}
	if path == "" {
		path = DefaultPath
	}
	for _, d := range strings.Split(path, ":") {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) && dir != "" {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: executable file not found in PATH (%s)", name, path)
}

// executable checks that p is a regular file the calling thread may
// execute (faccessat2 with AT_EACCESS: by the thread's effective and
// filesystem identity, not its real one).
func executable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not an executable file")
	}
	if err := unix.Faccessat2(unix.AT_FDCWD, p, unix.X_OK, unix.AT_EACCESS); err != nil {
		return fmt.Errorf("not executable: %w", err)
	}
	return nil
}

// searchable checks that dir is a directory the calling thread may enter.
func searchable(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return errors.New("not a directory")
	}
	return unix.Faccessat2(unix.AT_FDCWD, dir, unix.X_OK, unix.AT_EACCESS)
}
