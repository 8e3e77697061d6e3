package logreply

import "github.com/gpusched/gpusched/internal/logfile"

// eventLog is api.EventLog, the type of a followed log's line
// (TestEventsAsEncodingJSON holds the two equal).
const eventLog = "log"

// Events encodes t's lines as the log events of a follow of name, a line
// each, as the daemon writes a stream's events: prefix (the line's start,
// up to and with `"event":`), the event as encoding/json gives it with
// HTML escaping off, and "}\n". It hands send the lines a chunk of up to
// Chunk at a time, in a buffer valid only during the call, and stops with
// send's first error.
func Events(prefix []byte, name string, t *logfile.Tailed, send func([]byte) error) error {
	head := appendString(append(append([]byte(nil), prefix...), `{"type":"`+eventLog+`","name":`...), name)
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
		b = append(b, head...)
		if len(line) > 0 || cut { // the event's line is omitempty
			b = appendEscaped(append(b, `,"line":"`...), line)
			if cut {
				b = appendEscaped(b, logfile.CutMarker)
			}
			b = append(b, '"')
		}
		b = append(b, "}}\n"...)
		return nil
	})
	if err != nil || len(b) == 0 {
		return err
	}
	return send(b)
}
