package daemon

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

// bulkGate admits bulk work, leaving quick calls a P, and holds each user
// to their share of the daemon's CPU (bulkgate.Gate).
type bulkGate interface {
	Await(ctx context.Context, uid uint32) error
	Within(uid uint32) bool
	Enter(ctx context.Context, uid uint32) (*bulkgate.Slot, error)
}

// passUID is whose turn a placement pass takes at the bulk gate: the
// daemon's, a uid no user has, never held to a CPU share.
const passUID = limits.Daemon

// logChunk is how many lines of a logs reply are encoded between yields:
// a fraction of a millisecond of work.
const logChunk = 4096

// encodedSize is about the size of res encoded: exactly, when nothing in it
// needs escaping. The reply is gathered in one allocation of it rather than
// in doublings, which allocated twice the reply.
func encodedSize(res api.LogsResult) int {
	n := len(res.Name) + 32
	for _, l := range res.Lines {
		n += len(l) + 3
	}
	return n
}

// encodeLogs encodes res as encodeResult does, its lines a chunk at a time,
// yielding slot between chunks.
func encodeLogs(ctx context.Context, slot *bulkgate.Slot, res api.LogsResult) (encoded, error) {
	if res.Lines == nil {
		return encodeResult(res) // null, as it encodes
	}
	var b, chunk bytes.Buffer
	b.Grow(encodedSize(res))
	enc := json.NewEncoder(&chunk)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res.Name); err != nil {
		return nil, err
	}
	b.WriteString(`{"name":`)
	b.Write(bytes.TrimSuffix(chunk.Bytes(), []byte("\n")))
	b.WriteString(`,"lines":[`)
	for i := 0; i < len(res.Lines); i += logChunk {
		if i > 0 {
			if err := slot.Yield(ctx); err != nil {
				return nil, err
			}
			b.WriteByte(',')
		}
		chunk.Reset()
		if err := enc.Encode(res.Lines[i:min(i+logChunk, len(res.Lines))]); err != nil {
			return nil, err
		}
		b.Write(chunk.Bytes()[1 : chunk.Len()-2]) // within "[" and "]\n"
	}
	b.WriteByte(']')
	if res.Truncated {
		b.WriteString(`,"truncated":true`)
	}
	b.WriteByte('}')
	return encoded(b.Bytes()), nil
}
