package logfile

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Copy is one file of a log on disk: the log itself (Index 0) or its
// Index-th rotated copy.
type Copy struct {
	Path  string
	Index int
	Bytes int64
	Mod   time.Time
}

// AppendCopies appends to dst path and its keep rotated copies, those that
// exist as regular files, the log itself first.
func AppendCopies(dst []Copy, path string, keep int) []Copy {
	var st unix.Stat_t
	for i := 0; i <= keep; i++ {
		p := rotatedPath(path, i)
		if unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			dst = append(dst, Copy{Path: p, Index: i, Bytes: st.Size, Mod: time.Unix(st.Mtim.Unix())})
		}
	}
	return dst
}

// Bytes is what path and its keep rotated copies hold on disk together;
// a copy that is missing or not a regular file counts nothing.
func Bytes(path string, keep int) int64 {
	var n int64
	for _, c := range AppendCopies(nil, path, keep) {
		n += c.Bytes
	}
	return n
}

// Empty truncates the log at path to nothing in place and appends note, a
// line saying why. The process's O_APPEND descriptor writes on after it, and
// followers read it as a rotation; what the log held is gone.
func Empty(path, note string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	if _, err := f.WriteString(note); err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	return nil
}
