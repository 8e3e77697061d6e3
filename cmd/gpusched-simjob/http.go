package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Bounds on what a client may send or ask for.
const (
	maxBody      = 1 << 20 // bytes of a request body
	maxTokens    = 4096    // tokens of one reply
	defaultTok   = 16      // tokens of a reply without max_tokens
	embeddingDim = 8
	// crashPrompt, as the whole content of a message or prompt, makes the
	// server exit mid-response, as a model server that crashes does.
	crashPrompt = "CRASH"
	crashStatus = 70
)

// server is the fake OpenAI-compatible model server of --http: what a
// router sees of llama.cpp's llama-server or vLLM, without a model.
type server struct {
	model string
	// pace runs between two streamed tokens (the model's time per token:
	// --token-delay); nil: none.
	pace    func()
	slots   *slots      // --parallel; nil: every request generates at once
	readyAt time.Time   // --load-seconds after the start
	loaded  atomic.Bool // its --vram is allocated
	// gpuBusy reports whether its CUDA calls would block now (the process
	// is locked or checkpointed for a freeze); nil without --vram.
	gpuBusy func() bool
	crash   func()
	logf    func(format string, args ...any) // a line of the job's output
	seq     atomic.Uint64
	apiKey  string // $LLAMA_API_KEY: every endpoint but the public ones asks for it
}

// listen binds 127.0.0.1:port before the job loads, as llama-server does,
// so that a health check sees "loading" rather than a refused connection.
// It listens on plain TCP, as llama-server and vLLM do: Go 1.24 and later
// listen with MPTCP by default, whose sockets CRIU cannot dump ("inet:
// Unsupported proto 262"), so a hibernate would fail.
func listen(port int) (net.Listener, error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("--http %d: %w", port, err)
	}
	return ln, nil
}

// serve answers on ln until the process exits.
func (s *server) serve(ln net.Listener) {
	srv := &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	_ = srv.Serve(ln) // returns only if the listener fails
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /v1/completions", s.completions)
	mux.HandleFunc("POST /v1/embeddings", s.embeddings)
	mux.HandleFunc("GET /slots", s.slotStates)
	if s.slots != nil {
		mux.HandleFunc("GET /props", s.props)
	}
	if s.apiKey == "" {
		return mux
	}
	return s.requireKey(mux)
}

// apiKeyEnv is where llama-server reads --api-key from when the flag is
// not given (llama.cpp common/arg.cpp: --api-key ... set_env("LLAMA_API_KEY")).
const apiKeyEnv = "LLAMA_API_KEY"

// publicPaths answer without a key, as llama-server's do (tools/server:
// /health, /v1/health, /models, /v1/models).
var publicPaths = map[string]bool{"/health": true, "/v1/health": true, "/models": true, "/v1/models": true}

// requireKey answers a request to any other path without the key as
// llama-server does: 401, {"error": {"code": 401, "message": "Invalid API
// Key", "type": "authentication_error"}}; the key is taken as
// "Authorization: Bearer KEY" or "X-Api-Key: KEY".
func (s *server) requireKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Api-Key")
		if h := r.Header.Get("Authorization"); got == "" && strings.HasPrefix(h, "Bearer ") {
			got = strings.TrimPrefix(h, "Bearer ")
		}
		if !publicPaths[r.URL.Path] && subtle.ConstantTimeCompare([]byte(got), []byte(s.apiKey)) != 1 {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
				"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ready reports whether the simulated model has loaded: its VRAM is held
// and --load-seconds have passed.
func (s *server) ready() bool {
	return s.loaded.Load() && !time.Now().Before(s.readyAt)
}

// health answers as llama.cpp's server does (tools/server/README.md, GET
// /health, since ggml-org/llama.cpp commit e75c627): 503
// {"status": "loading model"} while the model loads, then 200
// {"status": "ok"}. vLLM answers 200 once its engine runs
// (vllm/entrypoints/serve/instrumentator/health.py); a router that polls
// the status code works with both.
func (s *server) health(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "loading model"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// slotStates answers GET /slots as llama-server does (tools/server
// README, "GET /slots: Returns the current slots processing state",
// enabled by default in recent versions; --no-slots turns it off): one
// object per slot, here its id, its task (-1 when idle) and whether it is
// processing. llama-server adds each slot's sampling parameters and next
// token, and some versions (its README's older example) the prompt it is
// processing.
func (s *server) slotStates(w http.ResponseWriter, _ *http.Request) {
	n, busy := 1, 0
	if s.slots != nil {
		n, busy = s.slots.count()
	}
	out := make([]map[string]any, n)
	for i := range out {
		task := -1
		if i < busy {
			task = i
		}
		out[i] = map[string]any{"id": i, "id_task": task, "is_processing": i < busy}
	}
	writeJSON(w, http.StatusOK, out)
}

// props answers GET /props as llama-server does (tools/server README,
// "GET /props: Get server global properties"): its total_slots, "the
// total number of slots for process requests (defined by --parallel
// option)", and the model's path; llama-server adds the default
// generation settings, the chat template and the build. Without
// --parallel the stand-in has no number to give and answers 404, as a
// server with no /props (vLLM) does.
func (s *server) props(w http.ResponseWriter, _ *http.Request) {
	n, _ := s.slots.count()
	writeJSON(w, http.StatusOK, map[string]any{"total_slots": n, "model_path": s.model})
}

func (s *server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id": s.model, "object": "model", "created": 0, "owned_by": "gpusched-simjob",
		}},
	})
}

// genRequest is what the generation endpoints read of a request. The
// model field is ignored, as llama-server ignores it: the reply names the
// model this server holds.
type genRequest struct {
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"` // a string or an array of parts
	} `json:"messages"`
	Prompt    any    `json:"prompt"`
	Input     any    `json:"input"`
	Stream    bool   `json:"stream"`
	MaxTokens *int   `json:"max_tokens"`
	Model     string `json:"model"`
}

// accept reads a bounded JSON body into req and waits for a slot
// (--parallel), answering the client itself (and returning false) when it
// is bad or the model is not loaded yet. done gives the slot back.
func (s *server) accept(w http.ResponseWriter, r *http.Request, req *genRequest) (done func(), ok bool) {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	if err := json.NewDecoder(body).Decode(req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			apiError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxBody))
			return nil, false
		}
		apiError(w, http.StatusBadRequest, "invalid JSON body: "+err.Error())
		return nil, false
	}
	if req.MaxTokens != nil && (*req.MaxTokens < 1 || *req.MaxTokens > maxTokens) {
		apiError(w, http.StatusBadRequest, fmt.Sprintf("max_tokens %d: must be 1 to %d", *req.MaxTokens, maxTokens))
		return nil, false
	}
	if !s.ready() {
		// llama-server's answer to a request while it loads.
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": map[string]any{
			"code": 503, "message": "Loading model", "type": "unavailable_error"}})
		return nil, false
	}
	done = func() {}
	if s.slots != nil {
		var err error
		if done, err = s.slots.take(r.Context()); err != nil {
			return nil, false // the client hung up waiting: nobody to answer
		}
	}
	s.waitGPU()
	return done, true
}

// waitGPU blocks while the process is locked or checkpointed, as a CUDA
// call does (internal/simgpu), so that no token is produced while frozen.
func (s *server) waitGPU() {
	for s.gpuBusy != nil && s.gpuBusy() {
		time.Sleep(lockedRetry)
	}
}

// tokens is the deterministic reply of n tokens: the model's name, then
// numbered words.
func (s *server) tokens(n int) []string {
	toks := make([]string, n)
	toks[0] = s.model + ":"
	for i := 1; i < n; i++ {
		toks[i] = " tok" + strconv.Itoa(i)
	}
	return toks
}

func (req *genRequest) count() int {
	if req.MaxTokens != nil {
		return *req.MaxTokens
	}
	return defaultTok
}

// promptText is the text of the request's messages or prompt.
func (req *genRequest) promptText() []string {
	var parts []string
	for _, m := range req.Messages {
		parts = append(parts, texts(m.Content)...)
	}
	return append(parts, texts(req.Prompt)...)
}

// texts flattens a string, an array of strings or an array of content
// parts ({"type":"text","text":...}).
func texts(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if p, ok := e.(map[string]any); ok {
				if t, ok := p["text"].(string); ok {
					out = append(out, t)
				}
				continue
			}
			out = append(out, texts(e)...)
		}
		return out
	}
	return nil
}

func (req *genRequest) crashes() bool {
	for _, t := range req.promptText() {
		if t == crashPrompt {
			return true
		}
	}
	return false
}

func (req *genRequest) promptTokens() int {
	n := 0
	for _, t := range req.promptText() {
		n += len(strings.Fields(t))
	}
	return n
}

// chat answers /v1/chat/completions in OpenAI's format
// (platform.openai.com/docs/api-reference/chat/object and .../chat/streaming:
// "chat.completion", or "chat.completion.chunk" events, the first with the
// role, the last with an empty delta and the finish_reason, then
// "data: [DONE]").
func (s *server) chat(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	done, ok := s.accept(w, r, &req)
	if !ok {
		return
	}
	defer done()
	id, created := fmt.Sprintf("chatcmpl-simjob-%d", s.seq.Add(1)), time.Now().Unix()
	toks := s.tokens(req.count())
	if !req.Stream {
		if req.crashes() {
			s.crashMidBody(w)
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"id": id, "object": "chat.completion", "created": created, "model": s.model,
			"choices": []map[string]any{{
				"index":         0,
				"message":       map[string]any{"role": "assistant", "content": strings.Join(toks, "")},
				"logprobs":      nil,
				"finish_reason": "length",
			}},
			"usage": usage(req.promptTokens(), len(toks)),
		})
		return
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": s.model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
	}
	s.stream(w, req.crashes(), chunk(map[string]any{"role": "assistant", "content": ""}, nil), toks,
		func(tok string) any { return chunk(map[string]any{"content": tok}, nil) },
		chunk(map[string]any{}, "length"))
}

// completions answers the legacy /v1/completions ("text_completion").
func (s *server) completions(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	done, ok := s.accept(w, r, &req)
	if !ok {
		return
	}
	defer done()
	id, created := fmt.Sprintf("cmpl-simjob-%d", s.seq.Add(1)), time.Now().Unix()
	toks := s.tokens(req.count())
	choice := func(text string, finish any) map[string]any {
		return map[string]any{
			"id": id, "object": "text_completion", "created": created, "model": s.model,
			"choices": []map[string]any{{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}},
		}
	}
	if !req.Stream {
		if req.crashes() {
			s.crashMidBody(w)
		}
		resp := choice(strings.Join(toks, ""), "length")
		resp["usage"] = usage(req.promptTokens(), len(toks))
		writeJSON(w, http.StatusOK, resp)
		return
	}
	s.stream(w, req.crashes(), nil, toks, func(tok string) any { return choice(tok, nil) }, choice("", "length"))
}

// embeddings answers /v1/embeddings with a vector per input derived from
// a hash of the model and the input.
func (s *server) embeddings(w http.ResponseWriter, r *http.Request) {
	var req genRequest
	done, ok := s.accept(w, r, &req)
	if !ok {
		return
	}
	defer done()
	inputs := texts(req.Input)
	if len(inputs) == 0 {
		apiError(w, http.StatusBadRequest, "input: a string or an array of strings is required")
		return
	}
	data := make([]map[string]any, len(inputs))
	n := 0
	for i, in := range inputs {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": embed(s.model, in)}
		n += len(strings.Fields(in))
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": s.model,
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n},
	})
}

func embed(model, input string) []float64 {
	v := make([]float64, embeddingDim)
	for i := range v {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s\x00%s\x00%d", model, input, i)
		v[i] = float64(h.Sum64()%2001)/1000 - 1
	}
	return v
}

// stream writes server-sent events: first (if not nil), one event per
// token (flushed at once, paced), last, then "data: [DONE]".
// With crash it exits after the first token.
func (s *server) stream(w http.ResponseWriter, crash bool, first any, toks []string, event func(string) any, last any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if first != nil && send(first) != nil {
		return
	}
	for i, tok := range toks {
		if i > 0 && s.pace != nil {
			s.pace()
		}
		s.waitGPU()
		if send(event(tok)) != nil {
			if s.logf != nil {
				s.logf("simjob: client hung up after %d of %d tokens", i, len(toks))
			}
			return // stop generating
		}
		if crash {
			s.crash()
		}
	}
	if send(last) == nil {
		_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
		_ = rc.Flush()
	}
}

// crashMidBody sends the start of a reply, then crashes.
func (s *server) crashMidBody(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, `{"id":"crash","object":"chat.completion","model":%q,"choices":[`, s.model)
	_ = http.NewResponseController(w).Flush()
	s.crash()
}

func usage(prompt, completion int) map[string]int {
	return map[string]int{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
}

// apiError answers in OpenAI's error format.
func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// crashNow ends the process as a crashing model server does: at once,
// leaving its GPU memory to the driver (simgpu prunes a dead process's
// records, as the driver frees its memory).
func crashNow(out func(string, ...any)) func() {
	return func() {
		out("simjob: crashing mid-request (prompt %q)", crashPrompt)
		os.Exit(crashStatus)
	}
}
