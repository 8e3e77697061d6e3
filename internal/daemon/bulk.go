package daemon

import (
	"context"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/logfile"
)

// bulkGate admits bulk work, leaving quick calls a P, and holds each user
// to their share of the daemon's CPU (bulkgate.Gate).
type bulkGate interface {
	Await(ctx context.Context, uid uint32) error
	Within(uid uint32) bool
	Enter(ctx context.Context, uid uint32) (*bulkgate.Slot, error)
	Meter(ctx context.Context, uid uint32) (charge func(), err error)
}

// passUID is whose turn a placement pass takes at the bulk gate: the
// daemon's, a uid no user has, never held to a CPU share.
const passUID = limits.Daemon

// logChunk is how many lines of a logs reply are encoded between yields:
// a fraction of a millisecond of work.
const logChunk = 4096

// encodeLogs encodes a logs reply of name's lines as encodeResult encodes
// an api.LogsResult, from the bytes the tail read: into one allocation of
// about the reply's size (gathered by doublings it allocated twice the
// reply), with no string made of a line (their headers alone were a MiB
// for a log of empty lines). It yields slot every logChunk lines.
func encodeLogs(ctx context.Context, slot *bulkgate.Slot, name string, t *logfile.Tailed) (encoded, error) {
	b := make([]byte, 0, len(name)+32+t.Bytes()+3*t.Len())
	b = append(appendJSONString(append(b, `{"name":`...), name), `,"lines":[`...)
	n := 0
	err := t.Each(func(line []byte, cut bool) error {
		if n > 0 {
			if n%logChunk == 0 {
				if err := slot.Yield(ctx); err != nil {
					return err
				}
			}
			b = append(b, ',')
		}
		n++
		b = appendJSONEscaped(append(b, '"'), line)
		if cut {
			b = appendJSONEscaped(b, logfile.CutMarker)
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
	return encoded(append(b, '}')), nil
}
