package logfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// chunkSize is how much Tail and Follow read at a time.
	chunkSize = 64 << 10
	// tailAttempts bounds the retries of a Tail that raced a rotation.
	tailAttempts = 3
)

// Tail returns the last n lines of the log at path, oldest first, reading
// backwards from the end and continuing into path.1 … path.keep while it
// has fewer; n < 0 returns every retained line. A final line without a
// trailing newline is included. A missing log gives an empty slice.
func Tail(path string, n, keep int) ([]string, error) {
	lines, _, err := tail(path, n, keep, false)
	return lines, err
}

// TailForFollow is Tail for a caller that goes on with Follow: it returns
// only complete lines, leaving an unterminated last line to Follow, and the
// offset just past the last complete line of path, from which Follow goes on
// with no line missed or repeated.
func TailForFollow(path string, n, keep int) (lines []string, offset int64, err error) {
	return tail(path, n, keep, true)
}

// tail implements Tail and TailForFollow, retrying when a rotation truncated
// a file under it.
func tail(path string, n, keep int, complete bool) ([]string, int64, error) {
	if err := checkKeep(path, keep); err != nil {
		return nil, 0, err
	}
	for attempt := 1; ; attempt++ {
		lines, offset, err := tailOnce(path, n, keep, complete)
		if !errors.Is(err, errShrunk) || attempt == tailAttempts {
			return lines, offset, err
		}
	}
}

// span is the part of one file that a tail returns.
type span struct {
	name       string
	r          io.ReaderAt
	start, end int64
}

func tailOnce(path string, n, keep int, complete bool) (lines []string, offset int64, err error) {
	buf := make([]byte, chunkSize)
	var spans []span // newest first
	wanted := n      // lines still wanted; < 0 for all
	for i := 0; i <= keep && (i == 0 || wanted != 0); i++ {
		name := rotatedPath(path, i)
		f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("log %s: %w", name, err)
		}
		defer f.Close()
		s, count, err := lastSpan(f, name, wanted, i == 0 && complete, buf)
		if err != nil {
			return nil, 0, err
		}
		if i == 0 {
			offset = s.end
		}
		if wanted > 0 {
			wanted -= count
		}
		spans = append(spans, s)
	}
	lines = []string{}
	for i := len(spans) - 1; i >= 0; i-- {
		if lines, err = appendLines(lines, spans[i], buf); err != nil {
			return nil, 0, err
		}
	}
	return lines, offset, nil
}

// lastSpan finds the last n lines of f (all for n < 0; only complete ones
// if asked) and returns them with their count.
func lastSpan(f *os.File, name string, n int, complete bool, buf []byte) (span, int, error) {
	fi, err := f.Stat()
	if err != nil {
		return span{}, 0, fmt.Errorf("log %s: %w", name, err)
	}
	s := span{name: name, r: f, end: fi.Size()}
	if complete {
		if s.end, err = completeEnd(f, s.end, buf); err != nil {
			return span{}, 0, readErr(name, err)
		}
	}
	if n < 0 {
		return s, 0, nil
	}
	s.start, n, err = lastLines(f, s.end, n, buf)
	return s, n, readErr(name, err)
}

// completeEnd returns the offset just past the last newline in r[:size], or 0.
func completeEnd(r io.ReaderAt, size int64, buf []byte) (int64, error) {
	var end int64
	err := scanBack(r, size, buf, func(b []byte, at int64) bool {
		i := bytes.LastIndexByte(b, '\n')
		if i >= 0 {
			end = at + int64(i) + 1
		}
		return i >= 0
	})
	return end, err
}

// lastLines returns where the last n lines of r[:size] start and how many
// lines there are from there, which is fewer than n only when the start is 0.
// A final newline ends the last line; bytes after the last newline are a line.
func lastLines(r io.ReaderAt, size int64, n int, buf []byte) (start int64, count int, err error) {
	if size == 0 || n == 0 {
		return size, 0, nil
	}
	last := true
	err = scanBack(r, size, buf, func(b []byte, at int64) bool {
		if last && b[len(b)-1] == '\n' {
			b = b[:len(b)-1]
		}
		last = false
		for i := bytes.LastIndexByte(b, '\n'); i >= 0; i = bytes.LastIndexByte(b[:i], '\n') {
			if count++; count == n {
				start = at + int64(i) + 1
				return true
			}
		}
		return false
	})
	if count < n {
		return 0, count + 1, err
	}
	return start, n, err
}

// scanBack reads r[:end] in chunks of len(buf), last chunk first, handing
// each with its offset to fn until fn returns true or the start is reached.
func scanBack(r io.ReaderAt, end int64, buf []byte, fn func(b []byte, at int64) bool) error {
	for end > 0 {
		at := max(end-int64(len(buf)), 0)
		b := buf[:end-at]
		if _, err := r.ReadAt(b, at); err != nil {
			return err
		}
		if fn(b, at) {
			return nil
		}
		end = at
	}
	return nil
}

// appendLines appends the lines of s to lines; the end of s ends a line.
func appendLines(lines []string, s span, buf []byte) ([]string, error) {
	var lb lineBuf
	emit := func(line string) error {
		lines = append(lines, line)
		return nil
	}
	for at := s.start; at < s.end; {
		b := buf[:min(int64(len(buf)), s.end-at)]
		if _, err := s.r.ReadAt(b, at); err != nil {
			return nil, readErr(s.name, err)
		}
		lb.feed(b, emit) // emit never fails
		at += int64(len(b))
	}
	lb.flush(emit)
	return lines, nil
}

// readErr wraps an error from ReadAt; reading past the end means the file
// shrank since its size was taken.
func readErr(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF):
		return fmt.Errorf("log %s: %w", name, errShrunk)
	default:
		return fmt.Errorf("log %s: %w", name, err)
	}
}
