package logreply

import "github.com/gpusched/gpusched/internal/logfile"

// eventLog is api.EventLog, the type of a followed log's line
// (TestEventsAsEncodingJSON holds the two equal).
const eventLog = "log"

// EventHead is how each log event line of a follow of name begins: prefix
// (the stream's line up to and with `"event":`), then the event's type and
// name, as encoding/json gives them with HTML escaping off.
func EventHead(prefix []byte, name string) []byte {
	return appendString(append(append([]byte(nil), prefix...), `{"type":"`+eventLog+`","name":`...), name)
}

// AppendEvent appends to dst the log event line of line (with
// logfile.CutMarker after it where cut), begun with head (EventHead) and
// ended with "}\n".
func AppendEvent[S []byte | string](dst, head []byte, line S, cut bool) []byte {
	dst = append(dst, head...)
	if len(line) > 0 || cut { // the event's line is omitempty
		dst = appendEscaped(append(dst, `,"line":"`...), line)
		if cut {
			dst = appendEscaped(dst, logfile.CutMarker)
		}
		dst = append(dst, '"')
	}
	return append(dst, "}}\n"...)
}

// Events encodes t's lines as the log events of a follow of name, a line
// each (AppendEvent), each line begun with prefix. It hands send the lines
// a chunk of up to Chunk at a time, in a buffer valid only during the
// call, and stops with send's first error.
func Events(prefix []byte, name string, t *logfile.Tailed, send func([]byte) error) error {
	head := EventHead(prefix, name)
	var b []byte
	n := 0
	err := t.Each(func(line []byte, cut bool) error {
		if n > 0 && n%Chunk == 0 {
			if err := send(b); err != nil {
				return err
			}
			b = b[:0]
		}
		n++
		b = AppendEvent(b, head, line, cut)
		return nil
	})
	if err != nil || len(b) == 0 {
		return err
	}
	return send(b)
}
