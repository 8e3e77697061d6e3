package logfile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

const (
	// seenLen is how many of the bytes last read Follow keeps to recognise
	// a file that was truncated and then refilled past its offset.
	seenLen = 64
	// MaxLag is how far behind the end of the file Follow may fall before
	// it skips ahead.
	MaxLag = 8 << 20
)

// SkipFormat is the line Follow emits, with the count, for bytes it skipped.
const SkipFormat = "[%d bytes skipped]"

// Lines takes what Follow reads: each line, in order, and then a Flush
// once the lines of one read of the file (up to 64 KiB of it) are given,
// before Follow reads on, waits for the file to change or returns. A Lines
// may hold what it is given until its Flush: a follower of a chatty log
// writes a read's worth of lines to its client at once.
type Lines interface {
	Line(line string) error
	Flush() error
}

// Follow gives out every line appended to path after byte offset (from
// TailForFollow), in order, each once it is complete. It sleeps between
// writes until w reports a change to the file. When the file turns out to
// have been truncated (by Rotate), it carries on from offset 0; the line in
// progress carries over, since the writer continues it in the new file.
//
// When done is closed (the process exited), Follow reads what remains, gives
// out a final unterminated line if any, and returns nil. It returns
// ctx.Err() when ctx ends, and the error of out if out fails.
//
// Follow reads through its own descriptor and watches the inode open
// there: the file is never replaced (Rotate truncates in place), and an
// unlinked file still held open keeps reporting writes, so no directory
// watch is needed. A truncation is noticed when the file is shorter than
// what was read or when the bytes just before the offset changed; a
// follower that lags behind a rotation loses what was written between its
// offset and the rotation (that is in path.1).
//
// Follow holds at most MaxLine bytes of a line and reads at most MaxLag
// bytes behind the end of the file: when it falls further behind (a client
// slower than the writer, or a file extended by a hole), it gives out the
// line in progress cut, then a SkipFormat line, and goes on MaxLag bytes before
// the end. A line it starts inside (at such a point, or at an offset that
// is not a line start) is cut.
func Follow(ctx context.Context, w *Watcher, path string, offset int64, done <-chan struct{}, out Lines) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	defer f.Close()
	// Watch before the first read: a write after this point wakes the loop.
	sub, err := w.subscribe(f)
	if err != nil {
		return fmt.Errorf("log %s: %w", path, err)
	}
	defer sub.close()
	fl := &follower{f: f, path: path, buf: make([]byte, chunkSize), emit: out.Line, flush: out.Flush}
	if err := fl.startAt(offset); err != nil {
		return err
	}
	for {
		if err := fl.drain(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			if err := fl.drain(ctx); err != nil {
				return err
			}
			if err := fl.lines.flush(out.Line); err != nil {
				return err
			}
			return out.Flush()
		case <-sub.changed:
		case <-sub.ended:
			return fmt.Errorf("log %s: %w", path, errWatchEnded)
		}
	}
}

// follower is the reading state of one Follow.
type follower struct {
	f      *os.File
	path   string
	offset int64  // next byte to read
	seen   []byte // the bytes just before offset, as read: min(seenLen, offset) of them
	check  [seenLen]byte
	buf    []byte
	lines  lineBuf
	emit   func(string) error // Lines.Line
	flush  func() error       // Lines.Flush
}

// drain reads and emits up to the current end of the file.
func (fl *follower) drain(ctx context.Context) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fl.keepUp(); err != nil {
			return err
		}
		n, rerr := fl.f.ReadAt(fl.buf, fl.offset)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return fmt.Errorf("log %s: %w", fl.path, rerr)
		}
		// Checked after the read, so that a chunk read from a file truncated
		// just before it is dropped too.
		intact, err := fl.intact()
		if err != nil {
			return err
		}
		if !intact {
			fl.offset, fl.seen = 0, fl.seen[:0]
			continue
		}
		fl.advance(fl.buf[:n])
		if err := fl.lines.feed(fl.buf[:n], fl.emit); err != nil {
			return err
		}
		if err := fl.flush(); err != nil {
			return err
		}
		if rerr != nil {
			return nil
		}
	}
}

// keepUp skips ahead to MaxLag bytes before the end of the file when the
// offset is further behind.
func (fl *follower) keepUp() error {
	fi, err := fl.f.Stat()
	if err != nil {
		return fmt.Errorf("log %s: %w", fl.path, err)
	}
	to := fi.Size() - MaxLag
	if to <= fl.offset {
		return nil
	}
	if err := fl.lines.cutShort(fl.emit); err != nil {
		return err
	}
	if err := fl.emit(fmt.Sprintf(SkipFormat, to-fl.offset)); err != nil {
		return err
	}
	fl.seen = fl.seen[:0]
	return fl.startAt(to)
}

// startAt moves to offset, cutting the first line when offset is inside
// one. An offset past the end is left to intact.
func (fl *follower) startAt(offset int64) error {
	fl.offset = offset
	if offset == 0 {
		return nil
	}
	mid, err := midLine(fl.f, offset)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("log %s: %w", fl.path, err)
	}
	fl.lines.cut = fl.lines.cut || mid
	return nil
}

// intact reports whether the bytes before the offset are still those that
// were read. At an offset given by the caller it takes them as they are.
func (fl *follower) intact() (bool, error) {
	n := min(int64(seenLen), fl.offset)
	if n == 0 {
		return true, nil
	}
	b := fl.check[:n]
	_, err := fl.f.ReadAt(b, fl.offset-n)
	switch {
	case errors.Is(err, io.EOF):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("log %s: %w", fl.path, err)
	case int64(len(fl.seen)) < n:
		fl.seen = append(fl.seen[:0], b...)
		return true, nil
	default:
		return bytes.Equal(b, fl.seen), nil
	}
}

// advance moves the offset past p, which was just read.
func (fl *follower) advance(p []byte) {
	fl.offset += int64(len(p))
	if len(p) >= seenLen {
		fl.seen = append(fl.seen[:0], p[len(p)-seenLen:]...)
		return
	}
	fl.seen = append(fl.seen, p...)
	if extra := len(fl.seen) - seenLen; extra > 0 {
		fl.seen = append(fl.seen[:0], fl.seen[extra:]...)
	}
}
