package daemon

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"github.com/gpusched/gpusched/pkg/api"
)

// lineBufferBytes is a connection's read buffer: a request line that fits
// (most are a few hundred bytes) is read in place; a longer one is
// gathered in a buffer from longLines. A connection holds it for its life:
// at 64 KiB, as it was, the idle connections of a user's share cost the
// daemon 96 KiB each with the write buffer, and a call per connection (the
// CLI; refused streams, retried) as much in allocation.
const lineBufferBytes = 4 << 10

// longLines holds the buffers of request lines longer than lineBufferBytes
// for reuse. Gathered afresh each time, a caller's runs with 250 KiB
// command lines cost the daemon twice their size in allocations apiece
// (append's doubling): over half of all it allocated under the fairness
// benchmark's flood, and the collections that went with it.
var longLines = sync.Pool{New: func() any { return new([]byte) }}

// lineTooLong is a request line over api.MaxLineBytes; it was skipped.
type lineTooLong struct{ n int }

func (e *lineTooLong) Error() string {
	return "request line too long: over " + itoa(api.MaxLineBytes) + " bytes"
}

// linesOverBudget is a long request line refused by its user's budget of
// lines being gathered (--max-request-bytes-per-user); it was skipped.
type linesOverBudget struct{}

func (linesOverBudget) Error() string {
	return "request line refused: your connections' long request lines being read hold --max-request-bytes-per-user; send fewer at once"
}

// lineReader reads a connection's request lines.
type lineReader struct {
	r    *bufio.Reader
	long *[]byte // the pooled buffer the last line was gathered in; nil if none
	// hold holds what a long line may take of its user's budget
	// (connSet.longLine) while it is gathered and used; nil: no budget.
	hold func() (release func(), err error)
	held func() // what the last line holds, given back by release
}

func newLineReader(rd io.Reader, hold func() (func(), error)) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(rd, lineBufferBytes), hold: hold}
}

// next returns the next line without its newline; it is valid until the
// next call of next or release. A line longer than api.MaxLineBytes is
// consumed and reported as *lineTooLong, one longer than the read buffer
// that its user's budget refuses as linesOverBudget.
func (lr *lineReader) next() ([]byte, error) {
	lr.release()
	line, err := lr.r.ReadSlice('\n')
	if err == nil {
		return line[:len(line)-1], nil
	}
	if !errors.Is(err, bufio.ErrBufferFull) {
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return line, nil // last line without newline
		}
		return nil, err
	}
	if lr.hold != nil {
		held, err := lr.hold()
		if err != nil {
			return nil, lr.skip()
		}
		lr.held = held
	}
	lr.long = longLines.Get().(*[]byte)
	buf := append((*lr.long)[:0], line...)
	defer func() { *lr.long = buf[:0] }() // keeps what append grew
	for {
		line, err = lr.r.ReadSlice('\n')
		if len(buf) <= api.MaxLineBytes {
			buf = append(buf, line...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if len(buf) > api.MaxLineBytes {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, &lineTooLong{n: len(buf)}
		}
		if err == nil {
			return buf[:len(buf)-1], nil
		}
		return buf, nil
	}
}

// skip consumes the rest of a refused line and says why: linesOverBudget,
// or the read's own error.
func (lr *lineReader) skip() error {
	for {
		_, err := lr.r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
		case err == nil:
			return linesOverBudget{}
		default:
			return err
		}
	}
}

// release gives the buffer of the last line back to longLines, and what it
// held of its user's budget back; the line must not be used after it.
func (lr *lineReader) release() {
	if lr.long != nil {
		longLines.Put(lr.long)
		lr.long = nil
	}
	if lr.held != nil {
		lr.held()
		lr.held = nil
	}
}
