package logreply

import (
	"context"

	"github.com/gpusched/gpusched/internal/logfile"
)

// Chunk is how many lines Encode encodes between calls of its yield: a
// fraction of a millisecond of work.
const Chunk = 4096

// Encode encodes a logs reply of name's lines in t as one compact JSON
// value, byte for byte what encoding/json gives for the api.LogsResult
// with HTML escaping off: into one allocation of about the reply's size
// (gathered by doublings it allocated twice the reply). It calls yield
// every Chunk lines (nil: never) and stops with its error.
func Encode(ctx context.Context, name string, t *logfile.Tailed, yield func(context.Context) error) ([]byte, error) {
	b := make([]byte, 0, len(name)+32+t.Bytes()+3*t.Len())
	b = append(appendString(append(b, `{"name":`...), name), `,"lines":[`...)
	n := 0
	err := t.Each(func(line []byte, cut bool) error {
		if n > 0 {
			if n%Chunk == 0 && yield != nil {
				if err := yield(ctx); err != nil {
					return err
				}
			}
			b = append(b, ',')
		}
		n++
		b = appendEscaped(append(b, '"'), line)
		if cut {
			b = appendEscaped(b, logfile.CutMarker)
		}
		b = append(b, '"')
		return nil
	})
	if err != nil {
		return nil, err
	}
	b = append(b, ']')
	if t.Truncated() {
		b = append(b, `,"truncated":true`...)
	}
	return append(b, '}'), nil
}
