package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
)

// cutCause is why the router cut a request: neither the client's hang-up
// nor a failure of the model's server.
type cutCause struct{ why string }

func (c *cutCause) Error() string { return c.why }

var (
	// errTurnOver: its model's turn on the GPU ended under it
	// (turn_timeout), another model waiting for the GPU.
	errTurnOver = &cutCause{"its model's turn on the GPU ended"}
	// errSlotOver: its user held more of the model's slots than another
	// user who had waited turn_timeout for one (cutSlotHog).
	errSlotOver = &cutCause{"its user's turn on one of the model's slots ended"}
)

// cutGrace is how long a cut request still has to write its answer (a
// 503, or an error event ending its stream) to a client that reads it;
// a client that does not read loses its connection then.
const cutGrace = 5 * time.Second

// cutter ends one admitted request for a cause: it cancels the request's
// upstream call and bounds its writes to the client by cutGrace.
func cutter(w http.ResponseWriter, cancel context.CancelCauseFunc) func(*cutCause) {
	rc := http.NewResponseController(w)
	return func(why *cutCause) {
		cancel(why)
		rc.SetWriteDeadline(time.Now().Add(cutGrace))
	}
}

// armTurnEnd gives m's requests in flight turn_timeout to finish once a
// model sharing one of its GPUs waits for room (TurnBound bounds how many
// it admits meanwhile): one request that never ended (a reply streamed
// to a client that reads it slowly, or not at all) held m, and so every
// model sharing its GPU away from everyone, for ever. Armed once per
// contention; callers hold r.mu.
func (r *Router) armTurnEnd(m *model) {
	if m.turnEnd != nil || m.hold == nil || m.inflight == 0 || !r.contended(m) {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(r.cfg.TurnTimeout, func() { r.endTurn(m, t) })
	m.turnEnd = t
}

// endTurn cuts m's requests in flight if a model sharing its GPU still
// waits for room, and admits no more on this hold: the last cut request
// to end lets the hold go.
func (r *Router) endTurn(m *model, t *time.Timer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.turnEnd != t {
		return
	}
	m.turnEnd = nil
	if m.hold == nil || !r.contended(m) {
		return
	}
	m.served = TurnBound
	n := 0
	for l := range m.leases {
		if !l.cut {
			l.cut = true
			l.cancel(errTurnOver) // under r.mu: the lease's handler has not returned (end removes it first)
			n++
		}
	}
	r.metrics.turnCuts.WithLabelValues(m.cfg.Name).Add(float64(n))
	r.log.Warn("turn over: requests cut so that a model waiting for its GPUs can wake",
		zapModel(m), zap.Int("cut", n), zap.Duration("turn_timeout", r.cfg.TurnTimeout))
}

// stopTurnEnd disarms m's turn deadline (its hold is let go). Callers
// hold r.mu.
func stopTurnEnd(m *model) {
	if m.turnEnd != nil {
		m.turnEnd.Stop()
		m.turnEnd = nil
	}
}

// cutWhy is why the request with ctx was cut, or nil where it was not.
func cutWhy(ctx context.Context) *cutCause {
	var c *cutCause
	if errors.As(context.Cause(ctx), &c) {
		return c
	}
	return nil
}

// wasCut says whether the request with ctx was cut by a turn's end.
func wasCut(ctx context.Context) bool { return cutWhy(ctx) != nil }

// cutMessage tells a cut request's client why.
func cutMessage(ctx context.Context, model string, turn time.Duration) string {
	if cutWhy(ctx) == errSlotOver {
		return fmt.Sprintf("model %q: the request was cut: your user held more of the model's slots than another user who had waited %v for one (turn_timeout); retry", model, turn)
	}
	return fmt.Sprintf("model %q: the request was cut after its model had held the GPU %v while another model waited for it (turn_timeout); retry", model, turn)
}
