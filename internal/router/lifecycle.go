package router

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

// TurnBound is the fairness bound of a swap: once another model that
// shares a GPU waits for room, a held model admits at most this many
// requests from the start of its hold, then stops admitting, finishes
// what is in flight (within turn_timeout: armTurnEnd) and lets its hold
// go, so the waiting model is woken next. A model therefore serves up to
// TurnBound queued requests per turn before it can be evicted, and no
// model waits more than one turn of each other model in the queue before
// its own.
const TurnBound = 32

// model is one configured model's live state, guarded by Router.mu.
type model struct {
	cfg       *Model
	inflight  int                 // requests admitted and not yet answered
	waiting   int                 // requests waiting for a wake or a turn
	hold      Hold                // non-nil while held (inflight > 0, or a wake just landed)
	wake      *wakeCall           // the wake in progress, shared by every waiting request
	broken    bool                // its server failed a request: admit no more on this hold
	suspect   bool                // its server failed a request: the next wake checks it first
	lingering *time.Timer         // lets an idle hold go (HoldLinger)
	served    int                 // requests admitted in this hold
	leases    map[*lease]struct{} // the requests in flight
	turnEnd   *time.Timer         // cuts them turn_timeout into a contention (armTurnEnd)
	lastUsed  time.Time
	idle      *time.Timer     // freezes it after cfg.TTL without requests
	freezing  bool            // an unload freezes it: wakes wait
	transport *http.Transport // to its server
	slots     *limits.Fair    // its server's slots, shared between users; nil: no bound
	met       *modelMetrics   // its per-request series
}

// wakeCall is one wake of a model; done closes when it ends, err says how.
type wakeCall struct {
	done       chan struct{}
	err        error
	ticket     uint64 // wakes that contend for room go in ticket order
	contending bool   // it waits for room that held models occupy
	queued     bool   // it waits for older wakes (waitTurn): its model may make room for them
}

// lease is one admitted request's claim on its model.
type lease struct {
	r      *Router
	m      *model
	failed bool
	cancel func(*cutCause) // cuts the request (cutter); nil: nothing to cut
	cut    bool            // cut: its turn ended under it (endTurn, cutSlotHog)
	// While it holds one of its model's slots: the user it was taken for,
	// and since when.
	slotUID   uint32
	slotSince time.Time
	holdsSlot bool
	slotBack  func() // gives its slot back (once; takeSlot); nil: it took none
}

// giveSlotBack gives the request's slot back, if it took one, as soon as
// the server is done with it: its reply read whole (bufferReply). A
// stream keeps its slot to its end. Called from the request's own
// goroutine.
func (l *lease) giveSlotBack() {
	if l.slotBack != nil {
		l.slotBack()
	}
}

// acquire admits one request to m, waking m first when it is not held,
// and returns the lease the request must end; cut ends the request when
// its turn does (nil: nothing to cut). Requests that arrive while m wakes
// wait for that one wake.
func (r *Router) acquire(ctx context.Context, m *model, cut func(*cutCause)) (*lease, error) {
	start := time.Now()
	waited := false
	r.mu.Lock()
	defer func() {
		var h Hold
		if waited {
			m.waiting--
			m.met.waiting.Dec()
			m.met.waitSeconds.Observe(time.Since(start).Seconds())
			if r.unneeded(m) { // the last waiter gave up on a hold that landed
				h = r.letGo(m)
			}
		}
		r.mu.Unlock()
		r.closeHold(m, h)
	}()
	for {
		if m.hold != nil && !m.broken && r.admits(m) {
			m.inflight++
			m.served++
			if m.lingering != nil {
				m.lingering.Stop()
				m.lingering = nil
			}
			m.lastUsed = time.Now()
			if m.idle != nil {
				m.idle.Stop()
				m.idle = nil
			}
			m.met.inflight.Inc()
			l := &lease{r: r, m: m, cancel: cut}
			if cut != nil {
				m.leases[l] = struct{}{}
			}
			r.armTurnEnd(m)
			return l, nil
		}
		if m.hold == nil && m.wake == nil && !m.freezing {
			r.startWake(m)
		}
		if !waited {
			waited = true
			m.waiting++
			m.met.waiting.Inc()
		}
		w, changed := m.wake, r.changed
		var done chan struct{}
		if w != nil {
			done = w.done
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			r.mu.Lock()
			return nil, ctx.Err()
		case <-changed:
		case <-done:
		}
		r.mu.Lock()
		if w != nil && m.wake != w && w.err != nil {
			return nil, w.err // the wake this request waited for failed
		}
	}
}

// admits says whether held m may take one more request: always, unless a
// model sharing one of its GPUs waits for room and m has had its turn.
func (r *Router) admits(m *model) bool {
	return m.served < TurnBound || !r.contended(m)
}

// end ends the request's claim; the last one in flight lets the hold go.
func (l *lease) end() {
	r, m := l.r, l.m
	r.mu.Lock()
	delete(m.leases, l)
	m.inflight--
	m.lastUsed = time.Now()
	m.met.inflight.Dec()
	if l.failed {
		m.broken, m.suspect = true, true
	}
	var h Hold
	switch {
	case !r.unneeded(m):
	case m.broken || r.contended(m):
		h = r.letGo(m)
	default:
		r.linger(m)
	}
	r.mu.Unlock()
	r.closeHold(m, h)
}

// HoldLinger is how long an idle model keeps its hold after its last
// request, unless a model sharing its GPU waits for room (it then goes at
// once): back-to-back requests then cost no call to the daemon.
const HoldLinger = 2 * time.Second

// linger lets m's hold go HoldLinger from now unless a request takes it
// first. Callers hold r.mu.
func (r *Router) linger(m *model) {
	var t *time.Timer
	t = time.AfterFunc(HoldLinger, func() {
		r.mu.Lock()
		var h Hold
		if m.lingering == t && m.inflight == 0 && m.waiting == 0 {
			h = r.letGo(m)
		}
		r.mu.Unlock()
		r.closeHold(m, h)
	})
	m.lingering = t
}

// contended says whether a wake of another model sharing a GPU with m
// waits for room. Callers hold r.mu.
func (r *Router) contended(m *model) bool {
	for _, o := range r.models {
		if o != m && o.wake != nil && o.wake.contending && overlaps(o.cfg, m.cfg) {
			return true
		}
	}
	return false
}

// releaseIdleHolds lets go the lingering holds of models sharing a GPU
// with m, which waits for room. Callers hold r.mu; they close the
// returned holds with closeHold once they have unlocked it.
func (r *Router) releaseIdleHolds(m *model) map[*model]Hold {
	out := map[*model]Hold{}
	for _, o := range r.models {
		if o != m && o.hold != nil && o.inflight == 0 && overlaps(o.cfg, m.cfg) {
			out[o] = r.letGo(o)
		}
	}
	return out
}

// unneeded says whether m's hold should go: nothing is in flight, and no
// waiting request is about to be admitted on it. Callers hold r.mu.
func (r *Router) unneeded(m *model) bool {
	return m.hold != nil && m.inflight == 0 && (m.waiting == 0 || m.broken || !r.admits(m))
}

// letGo takes m's hold away for closeHold, and arms its idle timer.
// Callers hold r.mu.
func (r *Router) letGo(m *model) Hold {
	h := m.hold
	m.hold, m.broken, m.lingering = nil, false, nil
	stopTurnEnd(m)
	m.transport.CloseIdleConnections()
	r.armIdle(m)
	return h
}

// closeHold closes a hold letGo took (nil: nothing) and then tells the
// waiters: the room is free for others only once the daemon has the
// release.
func (r *Router) closeHold(m *model, h Hold) {
	if h == nil {
		return
	}
	if err := h.Close(); err != nil {
		r.log.Warn("release hold", zapModel(m), zap.Error(err))
	}
	r.mu.Lock()
	r.broadcast()
	r.mu.Unlock()
}

// broadcast wakes everyone waiting for a change. Callers hold r.mu.
func (r *Router) broadcast() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// overlaps says whether two models may share a GPU (no gpus: every GPU).
func overlaps(a, b *Model) bool {
	if len(a.GPUs) == 0 || len(b.GPUs) == 0 {
		return true
	}
	for _, g := range a.GPUs {
		if slices.Contains(b.GPUs, g) {
			return true
		}
	}
	return false
}

// idleLRU lists the models that may be frozen to make room for m: the
// router's other models sharing a GPU with it that nothing uses and no
// wake is bringing up (a wake queued behind m's does not count: m asked
// first), least recently used first.
func (r *Router) idleLRU(m *model) []*model {
	var out []*model
	for _, o := range r.models {
		if o != m && o.hold == nil && (o.wake == nil || o.wake.queued) && o.inflight == 0 && !o.freezing && overlaps(o.cfg, m.cfg) {
			out = append(out, o)
		}
	}
	slices.SortFunc(out, func(a, b *model) int {
		if c := a.lastUsed.Compare(b.lastUsed); c != 0 {
			return c
		}
		return cmpString(a.cfg.Name, b.cfg.Name)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// tier names where a wake started from, for the wake histogram.
func tier(was api.State) string {
	switch was {
	case api.StateRunning, api.StateStarting:
		return "running"
	case api.StateHibernated, api.StateHibernating, api.StateRestoring:
		return "hibernated"
	case "", api.StateExited:
		return "cold"
	}
	return "frozen"
}

// errNoRoom is a wake that found no room before its deadline.
var errNoRoom = errors.New("no room on its GPUs")
