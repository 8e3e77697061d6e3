package router

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// maxSlots bounds a model's slots setting.
const maxSlots = 65536

// slotFlags are the flags by which model servers are told how many
// requests they process at once: llama-server's -np/--parallel (its
// "number of server slots"; -1, its default in recent versions, picks a
// number itself: llamaAutoSlots) and vLLM's --max-num-seqs (sequences per
// iteration).
// Requests past them wait in the server's own queue, first come, first
// served: llama-server defers them (tools/server server_queue::defer, then
// pop_deferred_task as a slot frees) and vLLM's scheduler keeps them
// waiting in arrival order under its default "fcfs" policy.
var slotFlags = []string{"-np", "--parallel", "--max-num-seqs"}

// llamaAutoSlots is the number of slots llama-server picks where it is
// given none, or -1: tools/server/server.cpp, "n_parallel is set to auto,
// using n_parallel = 4 and kv_unified = true" (common/arg.cpp makes -1,
// auto, the server's default). Versions since llama.cpp#16736 (October
// 2025) and before the auto took four likewise where -np was left at 1;
// older ones run one slot, and the router then passes the server four
// requests at once, of which it queues three first come, first served:
// still not the whole of a user's burst.
const llamaAutoSlots = 4

// llamaSlotsEnv is the variable llama-server reads -np from where its
// command line does not give it (common/arg.cpp, set_env).
const llamaSlotsEnv = "LLAMA_ARG_N_PARALLEL"

// serverSlots is the number of slots a model server's argv gives it: the
// last slot flag's number, as both servers read it; for a llama-server
// given no flag, an llamaSlotsEnv=N assignment before it (as env(1)
// takes), else llamaAutoSlots; otherwise 0 (no number known).
func serverSlots(argv []string) int {
	llama, given, n := false, false, 0
	env := ""
	for i, a := range argv {
		if v, ok := strings.CutPrefix(a, llamaSlotsEnv+"="); ok && !llama {
			env = v
		}
		llama = llama || filepath.Base(a) == "llama-server"
		for _, f := range slotFlags {
			v, ok := strings.CutPrefix(a, f+"=")
			if a == f && i+1 < len(argv) {
				v, ok = argv[i+1], true
			}
			if ok {
				given, n = true, slotsOf(v, llama)
			}
		}
	}
	switch {
	case !llama || given:
		return n
	case env != "":
		return slotsOf(env, true)
	}
	return llamaAutoSlots
}

// slotsOf reads a slot flag's value v: a number of slots, llama-server's
// -1 (auto), or 0 where it is neither.
func slotsOf(v string, llama bool) int {
	k, err := strconv.Atoi(v)
	switch {
	case err == nil && k > 0 && k <= maxSlots:
		return k
	case err == nil && k < 0 && llama:
		return llamaAutoSlots
	}
	return 0
}

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
// generate (a POST, not a slotless one) and holds it on the request's lease l until the
// server is done with it (giveSlotBack) or the request ends, answering the
// client itself when the wait ends otherwise: its turn over, or the
// client gone. Each turn_timeout it waits, it cuts a request of a user
// holding more of m's slots than its own (cutSlotHog). Without slots, or
// for other requests (health, props, metrics, tokenizing), it passes at
// once.
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

// propsMax bounds the read of a server's GET /props (llama-server's
// carries the chat template, some tens of KiB).
const propsMax = 1 << 20

// learnSlots gives m the number of slots its server says it has, where
// the config does not set m's slots: llama-server's GET /props answers
// total_slots, "the total number of slots for process requests (defined by
// --parallel option)" (tools/server README), whatever set it (-np, its
// LLAMA_ARG_N_PARALLEL, its own auto, a wrapper's flags). A server that
// answers none (vLLM has no /props) keeps the number read from its cmd.
func (r *Router) learnSlots(ctx context.Context, m *model) {
	if m.cfg.SlotsSet || m.slots == nil {
		return
	}
	n, err := r.propsSlots(ctx, m)
	if err != nil {
		r.log.Debug("the model's server tells no number of slots", zapModel(m), zap.Error(err))
		return
	}
	if was := m.slots.Places(); was != n {
		m.slots.SetPlaces(n)
		r.log.Info("slots: the number the model's server has", zapModel(m), zap.Int("slots", n), zap.Int("was", was))
	}
}

// propsSlots asks m's server for its total_slots.
func (r *Router) propsSlots(ctx context.Context, m *model) (int, error) {
	req, err := r.serverRequest(ctx, fmt.Sprintf("http://127.0.0.1:%d/props", m.cfg.Port))
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Transport: m.transport, Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /props: %s", resp.Status)
	}
	var props struct {
		TotalSlots int `json:"total_slots"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, propsMax)).Decode(&props); err != nil {
		return 0, fmt.Errorf("GET /props: %w", err)
	}
	if props.TotalSlots < 1 || props.TotalSlots > maxSlots {
		return 0, fmt.Errorf("GET /props: total_slots %d is not 1-%d", props.TotalSlots, maxSlots)
	}
	return props.TotalSlots, nil
}
