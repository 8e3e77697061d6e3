package logfile

import "bytes"

const (
	// MaxLine is the longest line returned or emitted, in bytes, marker excluded.
	MaxLine = 64 << 10
	// CutMarker ends a line that was cut to MaxLine bytes.
	CutMarker = " [cut]"
)

// lineBuf assembles lines from consecutive chunks of a byte stream, holding
// at most MaxLine bytes of the line in progress.
type lineBuf struct {
	buf []byte
	cut bool // bytes of the line in progress were dropped
}

// feed adds p to the stream and emits each line it completes.
func (l *lineBuf) feed(p []byte, emit func(string) error) error {
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			l.add(p)
			return nil
		}
		l.add(p[:i])
		if err := emit(l.take()); err != nil {
			return err
		}
		p = p[i+1:]
	}
}

// cutShort emits the line in progress, if any, cut: the rest of it will
// not be read.
func (l *lineBuf) cutShort(emit func(string) error) error {
	if len(l.buf) == 0 && !l.cut {
		return nil
	}
	l.cut = true
	return emit(l.take())
}

// flush emits the line in progress, if any, as a final line.
func (l *lineBuf) flush(emit func(string) error) error {
	if len(l.buf) == 0 {
		return nil
	}
	return emit(l.take())
}

// add appends p to the line in progress, up to MaxLine bytes.
func (l *lineBuf) add(p []byte) {
	if room := MaxLine - len(l.buf); len(p) > room {
		p, l.cut = p[:room], true
	}
	l.buf = append(l.buf, p...)
}

// take returns the line in progress and starts a new one.
func (l *lineBuf) take() string {
	s := string(l.buf)
	if l.cut {
		s += CutMarker
	}
	l.buf, l.cut = l.buf[:0], false
	return s
}
