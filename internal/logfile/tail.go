package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// MaxTail is the most bytes of a log that Tail and TailForFollow read,
	// counted back from the end of the current file into the rotated
	// copies: what they return is at most this much, plus cut markers.
	MaxTail = 1 << 20
	// MaxTailLines is the most lines Tail and TailForFollow return: the
	// MaxTail bytes could otherwise be a million empty lines. At this many,
	// TailForFollow's string headers (16 bytes each) take no more memory
	// than the bytes read; lines of 16 bytes or more meet MaxTail first.
	MaxTailLines = MaxTail / 16
	// chunkSize is how much Tail and Follow read at a time.
	chunkSize = 64 << 10
	// tailAttempts bounds the retries of a Tail that raced a rotation.
	tailAttempts = 3
)

// Tail returns the last n lines of the log at path, oldest first, reading
// backwards from the end and continuing into path.1 … path.keep while it
// has fewer; n < 0 returns every retained line. A final line without a
// trailing newline is included. A missing log gives no lines. The lines
// are held as the bytes read (Tailed.Each), not a string each.
//
// Tail reads only the last MaxTail bytes of the log. When the lines asked
// for reach further back, it returns those that start within them, the
// oldest cut (with CutMarker) if it starts before them, and truncated.
// It returns at most the last MaxTailLines lines, with truncated when more
// were asked for and there are more. It returns ctx.Err() when ctx ends
// first.
func Tail(ctx context.Context, path string, n, keep int) (*Tailed, error) {
	return tail(ctx, path, n, keep, false)
}

// TailForFollow is Tail for a caller that goes on with Follow: it returns
// only complete lines, leaving an unterminated last line to Follow, and
// (Tailed.Offset) the offset just past the last complete line of path,
// from which Follow goes on with no line missed or repeated. It returns at
// most MaxTailLines lines, as Tail does. When the last MaxTail bytes of
// path hold no newline, the offset is where they start, and Follow cuts
// the line it finds there.
func TailForFollow(ctx context.Context, path string, n, keep int) (*Tailed, error) {
	return tail(ctx, path, n, keep, true)
}

// tail implements Tail and TailForFollow, retrying when a rotation truncated
// a file under it.
func tail(ctx context.Context, path string, n, keep int, complete bool) (*Tailed, error) {
	if err := checkKeep(path, keep); err != nil {
		return nil, err
	}
	capped := n < 0 || n > MaxTailLines
	if capped {
		n = MaxTailLines + 1 // one more, to tell whether any are left out
	}
	for attempt := 1; ; attempt++ {
		t, err := tailOnce(ctx, path, n, keep, complete)
		if errors.Is(err, errShrunk) && attempt < tailAttempts {
			continue
		}
		if err != nil {
			return nil, err
		}
		if capped && t.count > MaxTailLines {
			t.skip, t.truncated = t.count-MaxTailLines, true
		}
		return t, nil
	}
}

// span is the part of one file that a tail returns.
type span struct {
	name       string
	r          io.ReaderAt
	start, end int64
	cut        bool // start is inside a line, which is therefore cut
}

func tailOnce(ctx context.Context, path string, n, keep int, complete bool) (*Tailed, error) {
	buf := make([]byte, chunkSize)
	t := &Tailed{}
	var spans []span // newest first
	wanted := n      // lines still wanted; < 0 for all
	budget := int64(MaxTail)
	for i := 0; i <= keep && (i == 0 || wanted != 0); i++ {
		name := rotatedPath(path, i)
		f, err := os.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("log %s: %w", name, err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return nil, fmt.Errorf("log %s: %w", name, err)
		}
		if budget == 0 {
			if fi.Size() > 0 {
				t.truncated = true
				break
			}
			continue
		}
		floor := max(fi.Size()-budget, 0)
		s, count, err := lastSpan(ctx, f, name, fi.Size(), floor, wanted, i == 0 && complete, buf)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			t.offset = s.end
		}
		budget -= fi.Size() - s.start
		if wanted > 0 {
			wanted -= count
		}
		spans = append(spans, s)
		if s.start > 0 && wanted != 0 {
			t.truncated = true
			break
		}
	}
	return t, t.read(ctx, spans)
}

// lastSpan finds the last n lines of f[floor:size] (all for n < 0; only
// complete ones if asked) and returns them with their count.
func lastSpan(ctx context.Context, f *os.File, name string, size, floor int64, n int, complete bool, buf []byte) (span, int, error) {
	s := span{name: name, r: f, start: floor, end: size}
	var err error
	if complete {
		if s.end, err = completeEnd(ctx, f, size, floor, buf); err != nil {
			return span{}, 0, readErr(name, err)
		}
	}
	var count int
	s.start, count, err = lastLines(ctx, f, s.end, floor, n, buf)
	if err != nil {
		return span{}, 0, readErr(name, err)
	}
	if s.start > 0 && s.start == floor {
		if s.cut, err = midLine(f, s.start); err != nil {
			return span{}, 0, readErr(name, err)
		}
	}
	return s, count, nil
}

// midLine reports whether offset at > 0 of r is inside a line: the byte
// before it is not a newline.
func midLine(r io.ReaderAt, at int64) (bool, error) {
	var b [1]byte
	if _, err := r.ReadAt(b[:], at-1); err != nil {
		return false, err
	}
	return b[0] != '\n', nil
}

// completeEnd returns the offset just past the last newline in
// r[floor:size], or floor when there is none.
func completeEnd(ctx context.Context, r io.ReaderAt, size, floor int64, buf []byte) (int64, error) {
	end := floor
	err := scanBack(ctx, r, size, floor, buf, func(b []byte, at int64) bool {
		i := bytes.LastIndexByte(b, '\n')
		if i >= 0 {
			end = at + int64(i) + 1
		}
		return i >= 0
	})
	return end, err
}

// lastLines returns where the last n lines (all for n < 0) of r[floor:end]
// start and how many lines there are from there, which is fewer than n
// only when the start is floor. A final newline ends the last line; bytes
// after the last newline are a line.
func lastLines(ctx context.Context, r io.ReaderAt, end, floor int64, n int, buf []byte) (start int64, count int, err error) {
	if end == floor || n == 0 {
		return end, 0, nil
	}
	last := true
	err = scanBack(ctx, r, end, floor, buf, func(b []byte, at int64) bool {
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
	if n < 0 || count < n {
		return floor, count + 1, err
	}
	return start, n, err
}

// scanBack reads r[floor:end] in chunks of len(buf), last chunk first,
// handing each with its offset to fn until fn returns true or floor is
// reached.
func scanBack(ctx context.Context, r io.ReaderAt, end, floor int64, buf []byte, fn func(b []byte, at int64) bool) error {
	for end > floor {
		if err := ctx.Err(); err != nil {
			return err
		}
		at := max(end-int64(len(buf)), floor)
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

// readErr wraps an error from ReadAt; reading past the end means the file
// shrank since its size was taken. A context's error is returned as it is.
func readErr(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, io.EOF):
		return fmt.Errorf("log %s: %w", name, errShrunk)
	default:
		return fmt.Errorf("log %s: %w", name, err)
	}
}
