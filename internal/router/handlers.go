package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpusched/gpusched/pkg/api"
)

// routedPaths are the endpoints routed by their JSON body's "model".
var routedPaths = []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/messages"}

// Handler serves the router's endpoints (docs/router.md).
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range routedPaths {
		mux.HandleFunc("POST "+p, r.routeByBody)
	}
	mux.HandleFunc("GET /v1/models", r.listModels)
	mux.HandleFunc("/upstream/{model}/{rest...}", r.upstream)
	mux.HandleFunc("GET /running", r.running)
	mux.HandleFunc("POST /unload", r.unloadHandler)
	mux.HandleFunc("POST /unload/{model}", r.unloadHandler)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "OK\n") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{}))
	return r.auth(mux)
}

// routeByBody reads the body (at most MaxBody bytes), finds its model and
// proxies the request to it.
func (r *Router) routeByBody(w http.ResponseWriter, req *http.Request) {
	// The body is held whole until the request is answered (its wake may
	// take minutes): its bytes, as declared or max_body where not, come
	// out of its user's share of body_budget first.
	hold := req.ContentLength
	if hold < 0 || hold > r.cfg.MaxBody {
		hold = r.cfg.MaxBody
	}
	release, err := r.bodies.Take(peerUID(req.Context()), hold)
	if err != nil {
		writeError(w, req, http.StatusServiceUnavailable, "overloaded",
			fmt.Sprintf("the request bodies your user's requests hold in the router, with this one's %d bytes, would pass body_budget_per_user (%d) or body_budget (%d); retry once some are answered", hold, r.cfg.BodyPerUser, r.cfg.BodyBudget))
		return
	}
	defer release()
	body, err := readBody(w, req, r.cfg.MaxBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, req, http.StatusRequestEntityTooLarge, "request_too_large",
				fmt.Sprintf("request body is larger than %d bytes (max_body)", r.cfg.MaxBody))
			return
		}
		writeError(w, req, http.StatusBadRequest, "invalid_request_error", "cannot read the request body: "+err.Error())
		return
	}
	name, err := modelOf(body)
	if err != nil {
		writeError(w, req, http.StatusBadRequest, "invalid_request_error", "the body is not a JSON object with a \"model\" string: "+err.Error())
		return
	}
	if name == "" {
		writeError(w, req, http.StatusBadRequest, "invalid_request_error", "the body names no \"model\"")
		return
	}
	m, ok := r.lookup(name)
	if !ok {
		writeError(w, req, http.StatusNotFound, "model_not_found", fmt.Sprintf("no model %q here; GET /v1/models lists them", name))
		return
	}
	req.Body = newWholeBody(body)
	req.ContentLength = int64(len(body))
	r.serve(w, req, m)
}

// readBody reads req's body, at most max bytes (else a
// *http.MaxBytesError): in one allocation when it declares a length up to
// preallocMax; a longer one grows as its bytes arrive, so that a client
// cannot have memory taken by declaring a length it never sends.
func readBody(w http.ResponseWriter, req *http.Request, max int64) ([]byte, error) {
	body := http.MaxBytesReader(w, req.Body, max)
	n := req.ContentLength
	if n < 0 || n > min(max, preallocMax) {
		return io.ReadAll(body)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(body, b); err != nil {
		return nil, err
	}
	return b, nil
}

// serve wakes m (or waits for its wake or turn) and proxies the request.
func (r *Router) serve(w http.ResponseWriter, req *http.Request, m *model) {
	rec := &statusWriter{ResponseWriter: w}
	defer func() { m.met.answered(rec.status()) }()
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	req = req.WithContext(ctx)
	l, err := r.acquire(ctx, m, cutter(w, cancel))
	if err != nil {
		if req.Context().Err() != nil {
			rec.code = 499 // the client hung up while its model woke
			return
		}
		writeError(rec, req, http.StatusServiceUnavailable, "model_unavailable", err.Error())
		return
	}
	defer l.end()
	release, ok := r.takeSlot(rec, req, m, l)
	if !ok {
		return
	}
	defer release()
	defer func() {
		if p := recover(); p != nil { // ReverseProxy aborts a response cut mid-way
			if !wasCut(ctx) { // by its server, not by its turn's end
				l.fail()
			}
			panic(p)
		}
	}()
	r.proxies[m.cfg.Name].ServeHTTP(rec, req.WithContext(context.WithValue(ctx, proxyKey{}, l)))
}

// listModels answers as OpenAI's GET /v1/models.
func (r *Router) listModels(w http.ResponseWriter, _ *http.Request) {
	type entry struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []entry `json:"data"`
	}{Object: "list", Data: []entry{}}
	for _, n := range r.cfg.Names() {
		out.Data = append(out.Data, entry{ID: n, Object: "model", Created: r.started.Unix(), OwnedBy: "gpusched"})
	}
	writeJSON(w, http.StatusOK, out)
}

// modelStatus is one model in GET /running.
type modelStatus struct {
	Model    string    `json:"model"`
	State    api.State `json:"state"` // the daemon's; "" when it has no process
	Tier     api.Tier  `json:"tier,omitempty"`
	InFlight int       `json:"in_flight"`
	Queued   int       `json:"queued"` // of those, waiting for one of its slots
	Slots    int       `json:"slots"`  // requests passed to its server at once; 0: no bound
	Waiting  int       `json:"waiting"`
	Held     bool      `json:"held"`
	Waking   bool      `json:"waking"`
	LastUsed time.Time `json:"last_used,omitzero"`
}

// running lists every model with its process's state.
func (r *Router) running(w http.ResponseWriter, req *http.Request) {
	out := struct {
		Running []modelStatus `json:"running"`
	}{Running: []modelStatus{}}
	procs, err := r.states.get(req.Context(), r.ctx)
	if err != nil {
		writeError(w, req, http.StatusBadGateway, "daemon_error", err.Error())
		return
	}
	for _, n := range r.cfg.Names() {
		m := r.models[n]
		r.mu.Lock()
		s := modelStatus{Model: n, InFlight: m.inflight, Waiting: m.waiting, Held: m.hold != nil, Waking: m.wake != nil, LastUsed: m.lastUsed}
		r.mu.Unlock()
		if m.slots != nil {
			s.Queued = m.slots.Waiting()
			if n := m.slots.Places(); n < maxSlots {
				s.Slots = n
			}
		}
		if p, ok := procs[n]; ok {
			s.State, s.Tier = p.State, p.Tier
		}
		out.Running = append(out.Running, s)
	}
	writeJSON(w, http.StatusOK, out)
}

// unloadHandler freezes one model (/unload/NAME) or every idle one
// (/unload), for root, the router's own user (who may freeze them through
// the daemon anyway) and unload_users; a busy model is refused with 409
// and left as it is. Any other local user could otherwise freeze a model
// between every request of everyone else's, each of which would then wait
// for its thaw: the router would freeze its own processes for them, which
// the daemon lets no other user do.
func (r *Router) unloadHandler(w http.ResponseWriter, req *http.Request) {
	if uid := peerUID(req.Context()); !r.cfg.UnloadUsers.allows(uid) {
		writeError(w, req, http.StatusForbidden, "permission_error",
			forbidden("/unload freezes models everyone uses", "unload_users", uid))
		return
	}
	names := r.cfg.Names()
	if n := req.PathValue("model"); n != "" {
		m, ok := r.lookup(n)
		if !ok {
			writeError(w, req, http.StatusNotFound, "model_not_found", fmt.Sprintf("no model %q here", n))
			return
		}
		names = []string{m.cfg.Name}
	}
	var busy []string
	for _, n := range names {
		err := r.unload(req.Context(), r.models[n], true)
		var b errBusy
		switch {
		case errors.As(err, &b):
			busy = append(busy, b.Error())
		case err != nil:
			writeError(w, req, http.StatusBadGateway, "daemon_error", err.Error())
			return
		}
	}
	if len(busy) > 0 {
		writeError(w, req, http.StatusConflict, "model_busy", strings.Join(busy, "; "))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"unloaded": names})
}

func (r *Router) lookup(name string) (*model, bool) {
	c, ok := r.cfg.Lookup(name)
	if !ok {
		return nil, false
	}
	return r.models[c.Name], true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers in the error shape of the API the client speaks:
// Anthropic's for /v1/messages, OpenAI's otherwise.
func writeError(w http.ResponseWriter, req *http.Request, code int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	io.WriteString(w, errorJSON(strings.HasSuffix(req.URL.Path, "/v1/messages"), kind, msg)+"\n")
}

func errorJSON(anthropic bool, kind, msg string) string {
	var v any = map[string]any{"error": map[string]string{"message": msg, "type": kind}}
	if anthropic {
		v = map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": msg}}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// statusWriter remembers the status written, for the requests counter.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush through the wrapper.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) status() int {
	if s.code == 0 {
		return http.StatusOK
	}
	return s.code
}
