package logfile

import (
	"bytes"
	"context"
)

// Tailed is what a tail found: its lines, held as the bytes read (at most
// MaxTail of them) and handed out by Each. A reply of every line costs the
// bytes and what is made of them, not a string and its header per line:
// 65,536 empty lines were a MiB of headers for 64 KiB of log.
type Tailed struct {
	data      []byte    // the spans read, oldest first
	spans     []spanEnd // where each span ends in data
	count     int       // lines in data
	skip      int       // lines at the start of data left out (over MaxTailLines)
	offset    int64     // the end of what was read of path itself
	truncated bool      // lines asked for lie before the MaxTail bytes read, or past MaxTailLines
}

// spanEnd is where a span ends in Tailed.data, and whether its first line
// was cut (it starts before what was read).
type spanEnd struct {
	end int
	cut bool
}

// Len is how many lines Each hands out.
func (t *Tailed) Len() int { return t.count - t.skip }

// Truncated reports whether lines asked for were left out.
func (t *Tailed) Truncated() bool { return t.truncated }

// Offset is where Follow goes on after a TailForFollow.
func (t *Tailed) Offset() int64 { return t.offset }

// Bytes is about what the lines hold: the bytes read.
func (t *Tailed) Bytes() int { return len(t.data) }

// Each hands fn the lines in order, each without its newline and cut to
// MaxLine bytes; cut says CutMarker belongs after it. A line is valid only
// during its call. Each stops at fn's first error and returns it.
func (t *Tailed) Each(fn func(line []byte, cut bool) error) error {
	skip, from := t.skip, 0
	for _, s := range t.spans {
		b, first := t.data[from:s.end], s.cut
		from = s.end
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			cut := first
			first = false
			if len(line) > MaxLine {
				line, cut = line[:MaxLine], true
			}
			if skip > 0 {
				skip--
				continue
			}
			if err := fn(line, cut); err != nil {
				return err
			}
		}
	}
	return nil
}

// strings is the lines as strings, CutMarkers appended.
func (t *Tailed) strings() []string {
	lines := make([]string, 0, t.Len())
	t.Each(func(line []byte, cut bool) error {
		s := string(line)
		if cut {
			s += CutMarker
		}
		lines = append(lines, s)
		return nil
	})
	return lines
}

// read reads spans (newest first) into t, oldest first, and counts their
// lines: a newline ends a line, and so does the end of a span.
func (t *Tailed) read(ctx context.Context, spans []span) error {
	size := 0
	for _, s := range spans {
		size += int(s.end - s.start)
	}
	t.data = make([]byte, 0, size)
	for i := len(spans) - 1; i >= 0; i-- {
		s := spans[i]
		for at := s.start; at < s.end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(int64(chunkSize), s.end-at)
			b := t.data[len(t.data) : len(t.data)+int(n)]
			if _, err := s.r.ReadAt(b, at); err != nil {
				return readErr(s.name, err)
			}
			t.data = t.data[:len(t.data)+int(n)]
			at += n
		}
		b := t.data[t.spanStart():]
		t.count += bytes.Count(b, []byte("\n"))
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.count++
		}
		t.spans = append(t.spans, spanEnd{end: len(t.data), cut: s.cut})
	}
	return nil
}

// spanStart is where the span being read starts in data.
func (t *Tailed) spanStart() int {
	if len(t.spans) == 0 {
		return 0
	}
	return t.spans[len(t.spans)-1].end
}
