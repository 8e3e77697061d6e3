package router

// How many requests a model's server runs at once: read from its cmd,
// then asked of the server itself.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// maxSlots bounds a model's slots setting; as many places stand for no
// bound while no number is known (New, learnSlots).
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

// propsMax bounds the read of a server's GET /props (llama-server's
// carries the chat template, some tens of KiB).
const propsMax = 1 << 20

// learnSlots gives m the number of slots its server says it has, where
// the config does not set m's slots: llama-server's GET /props answers
// total_slots, "the total number of slots for process requests (defined by
// --parallel option)" (tools/server README), whatever set it (-np, its
// LLAMA_ARG_N_PARALLEL, its own auto, a wrapper's flags). Where the
// server answers none (vLLM has no /props), m keeps the number it had:
// the one read from its cmd, or one its server told at an earlier wake.
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
	resp, err := m.probeClient().Do(req)
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
