package logfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenAppend opens (creating it if needed) the log file at path for a
// process to inherit as stdout and stderr: write-only, O_APPEND, close-on-exec
// (os.OpenFile always adds it; exec.Cmd clears it on the child's fds 1 and 2),
// mode 0600 whatever the umask or the mode of an existing file.
func OpenAppend(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("log %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("log %s: %w", path, err)
	}
	return f, nil
}
