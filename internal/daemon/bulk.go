package daemon

import (
	"context"
	"time"

	"github.com/gpusched/gpusched/internal/bulkgate"
	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreply"
)

// bulkGate admits bulk work, leaving quick calls a P, and holds each user
// to their share of the daemon's CPU (bulkgate.Gate).
type bulkGate interface {
	Await(ctx context.Context, uid uint32) error
	Within(uid uint32) bool
	Enter(ctx context.Context, uid uint32) (*bulkgate.Slot, error)
	Meter(ctx context.Context, uid uint32) (charge func(), err error)
	Charge(uid uint32) (charge func())
	ChargeCPU(uid uint32, cpu time.Duration)
}

// passUID is whose turn a placement pass takes at the bulk gate: the
// daemon's, a uid no user has, never held to a CPU share.
const passUID = limits.Daemon

// encodeLogs encodes a logs reply of name's lines in t (logreply.Encode),
// yielding slot between chunks of lines.
func encodeLogs(ctx context.Context, slot *bulkgate.Slot, name string, t *logfile.Tailed) (encoded, error) {
	b, err := logreply.Encode(ctx, name, t, slot.Yield)
	return encoded(b), err
}
