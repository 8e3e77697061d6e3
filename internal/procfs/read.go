package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ErrTruncated reports a file longer than what its reader takes.
var ErrTruncated = errors.New("file over its size limit")

// Limits of ReadFile per kind of file, well above what the kernel writes
// there. The processes that a root daemon reads about are the callers' own,
// so every read of their files is bounded by one of these.
const (
	// MaxNumbers bounds files of a few numbers: stat (with its comm of at
	// most 16 bytes), statm, timens_offsets, boot_id.
	MaxNumbers = 4 << 10
	// MaxStatus bounds status, whose Groups line may list 65,536 groups.
	MaxStatus = 1 << 20
	// MaxPIDList bounds a list of pids: task/<tid>/children.
	MaxPIDList = 1 << 20
	// MaxArgs bounds cmdline and environ where their first bytes are
	// all that is needed.
	MaxArgs = 64 << 10
)

// ReadFile reads the file at path, at most limit bytes of it. A longer
// file gives its first limit bytes and an error wrapping ErrTruncated. It
// refuses a symbolic link as the last component and anything but a regular
// file, and does not block opening a FIFO.
func ReadFile(path string, limit int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > limit {
		return b[:limit], fmt.Errorf("%s: %w (%d bytes)", path, ErrTruncated, limit)
	}
	return b, nil
}
