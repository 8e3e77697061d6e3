package memfill

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
)

// stderrTail is how much of the helper's log errors quote.
const stderrTail = 4096

// openLog opens the helper's log for appending ("" is the null device)
// and returns it with its size.
func openLog(path string) (*os.File, int64, error) {
	if path == "" {
		f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		return f, 0, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// logSize returns the log's size; a missing or unnamed log is empty.
func logSize(path string) (int64, error) {
	if path == "" {
		return 0, nil
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// readTail returns the last max bytes of path after offset off, trimmed,
// marked with "..." when cut.
func readTail(path string, off int64, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	cut := st.Size()-off > max
	if cut {
		off = st.Size() - max
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, max))
	if err != nil {
		return "", err
	}
	s := strings.TrimSpace(string(b))
	if cut && s != "" {
		s = "..." + s
	}
	return s, nil
}
