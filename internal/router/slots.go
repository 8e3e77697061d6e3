package router

import (
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// slotless are the POST paths a model server answers without a slot: its
// tokenizer and chat template, applied as the request comes
// (llama-server's tools/server/server-context.cpp: post_tokenize,
// post_detokenize and post_apply_template post no task; vLLM's
// serving_tokenization answers from the API server's tokenizer). Such a
// request waiting behind a burst of generations would wait for nothing.
var slotless = map[string]bool{
	"/tokenize": true, "/detokenize": true, "/apply-template": true,
}

// takeSlot waits for one of m's slots for a request that has its server
// generate (a POST, not a slotless one) and holds it on the request's
// lease l until the server is done with it (giveSlotBack) or the request
// ends, answering the client itself when the wait ends otherwise: its
// turn over, or the client gone. Each turn_timeout it waits, it cuts a
// request of a user holding more of m's slots than its own (cutSlotHog).
// Without slots, or for other requests (health, props, metrics,
// tokenizing), it passes at once.
func (r *Router) takeSlot(w *statusWriter, req *http.Request, m *model, l *lease) (release func(), ok bool) {
	if m.slots == nil || req.Method != http.MethodPost || slotless[req.URL.Path] {
		return func() {}, true
	}
	uid := peerUID(req.Context())
	m.met.queued.Inc()
	put, err := m.slots.Take(req.Context(), uid, r.cfg.TurnTimeout, func() { r.cutSlotHog(m, uid) })
	m.met.queued.Dec()
	switch {
	case err == nil:
		r.mu.Lock()
		l.slotUID, l.slotSince, l.holdsSlot = uid, time.Now(), true
		r.mu.Unlock()
		var once sync.Once
		l.slotBack = func() {
			once.Do(func() {
				r.mu.Lock()
				l.holdsSlot = false
				r.mu.Unlock()
				put()
			})
		}
		return l.slotBack, true
	case wasCut(req.Context()):
		writeError(w, req, http.StatusServiceUnavailable, "turn_over", cutMessage(req.Context(), m.cfg.Name, r.cfg.TurnTimeout))
	default:
		w.code = 499 // the client hung up waiting
	}
	return nil, false
}

// cutSlotHog cuts one request holding a slot of m for a request of user
// waiter that has waited a turn for one: of the user holding the most of
// m's slots, more than waiter holds, the one holding its slot longest. A
// request holds its slot until its reply has reached its client, so
// without this a user's few requests whose replies were long, or read
// slowly or not at all, held every slot of m from everyone for as long
// as they liked; a server's own slots free when it has generated the
// reply. Users holding as many take turns of turn_timeout.
func (r *Router) cutSlotHog(m *model, waiter uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := map[uint32]int{}
	for l := range m.leases {
		if l.holdsSlot && !l.cut {
			held[l.slotUID]++
		}
	}
	var hog *lease
	for l := range m.leases {
		n := held[l.slotUID]
		if !l.holdsSlot || l.cut || n <= held[waiter] {
			continue
		}
		if hog == nil || n > held[hog.slotUID] || n == held[hog.slotUID] && l.slotSince.Before(hog.slotSince) {
			hog = l
		}
	}
	if hog == nil {
		return
	}
	hog.cut = true
	hog.cancel(errSlotOver) // under r.mu: the lease's handler has not returned (end removes it first)
	r.metrics.slotCuts.WithLabelValues(m.cfg.Name).Inc()
	r.log.Warn("slot turn over: a request cut so that another user waiting for a slot is served",
		zapModel(m), zap.Uint32("uid", hog.slotUID), zap.Int("holding", held[hog.slotUID]), zap.Uint32("waiting_uid", waiter),
		zap.Duration("turn_timeout", r.cfg.TurnTimeout))
}
