package router

import (
	"fmt"
	"net/http"
)

// upstream passes /upstream/NAME/REST through to model NAME as /REST: to
// every client where openUpstream says it is theirs, else to root, the
// router's own user and upstream_users.
func (r *Router) upstream(w http.ResponseWriter, req *http.Request) {
	m, ok := r.lookup(req.PathValue("model"))
	if !ok {
		writeError(w, req, http.StatusNotFound, "model_not_found", fmt.Sprintf("no model %q here; GET /v1/models lists them", req.PathValue("model")))
		return
	}
	path := "/" + req.PathValue("rest")
	if uid := peerUID(req.Context()); !openUpstream(req.Method, path) && !r.cfg.UpstreamUsers.allows(uid) {
		writeError(w, req, http.StatusForbidden, "permission_error", forbidden(
			fmt.Sprintf("%s %s on model %q's server acts on, or shows, what every user of the model shares (its slots and their prompts, adapters, caches, settings); only its generation endpoints and GETs of its health, models, props and metrics are everyone's", req.Method, path, m.cfg.Name),
			"upstream_users", uid))
		return
	}
	req.Body = http.MaxBytesReader(w, req.Body, r.cfg.MaxBody)
	req.URL.Path = path
	req.URL.RawPath = ""
	r.serve(w, req, m)
}

// openUpstream says whether any client may pass method and path to a
// model's server: what each user does for themselves (generate, embed,
// tokenize) and reads that show no other user's requests. Anything else
// reaches every user's work at once: llama-server's GET /slots (each
// slot's task, and in some versions its prompt), POST
// /slots/ID?action=save|restore|erase (its KV cache, to and from files),
// POST /lora-adapters (the adapters' scales for every request), POST
// /props (with --props: the server's defaults); vLLM's
// /reset_prefix_cache, /sleep and /wake_up, /collective_rpc and
// /v1/load_lora_adapter (development and runtime-update modes).
func openUpstream(method, path string) bool {
	switch method {
	case http.MethodGet, http.MethodHead:
		return openReads[path]
	case http.MethodPost:
		return openCalls[path]
	}
	return false
}

// openReads are the model servers' GET paths any client may use:
// llama-server's (tools/server README: /health, /v1/health, /models,
// /v1/models, /props, /metrics with --metrics) and vLLM's
// (vllm/entrypoints/openai/api_server.py: /health, /ping, /version,
// /v1/models, /metrics).
var openReads = map[string]bool{
	"/health": true, "/v1/health": true, "/ping": true, "/version": true,
	"/models": true, "/v1/models": true, "/props": true, "/metrics": true,
}

// openCalls are the model servers' POST paths that answer the caller's own
// request: llama-server's completion, chat, embedding, infill, rerank,
// tokenizer and template endpoints (tools/server README) and vLLM's
// OpenAI-compatible, pooling, scoring, audio and SageMaker ones
// (vllm/entrypoints/openai/api_server.py).
var openCalls = map[string]bool{
	"/completion": true, "/completions": true, "/v1/completions": true,
	"/chat/completions": true, "/v1/chat/completions": true,
	"/v1/responses": true, "/v1/messages": true, "/v1/messages/count_tokens": true,
	"/embedding": true, "/embeddings": true, "/v1/embeddings": true,
	"/infill": true, "/rerank": true, "/reranking": true, "/v1/rerank": true, "/v1/reranking": true, "/v2/rerank": true,
	"/tokenize": true, "/detokenize": true, "/apply-template": true,
	"/pooling": true, "/classify": true, "/score": true, "/v1/score": true,
	"/v1/audio/transcriptions": true, "/v1/audio/translations": true, "/invocations": true,
}
