package router

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// auth requires one of the configured API keys, as "Authorization: Bearer
// KEY" (OpenAI clients) or "x-api-key: KEY" (Anthropic clients), on every
// endpoint but /health. Without keys it lets everything through.
func (r *Router) auth(next http.Handler) http.Handler {
	if len(r.cfg.APIKeys) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/health" || r.keyOK(req) {
			next.ServeHTTP(w, req)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpusched-router"`)
		writeError(w, req, http.StatusUnauthorized, "authentication_error",
			"missing or wrong API key: send Authorization: Bearer KEY or x-api-key: KEY")
	})
}

func (r *Router) keyOK(req *http.Request) bool {
	got := req.Header.Get("X-Api-Key")
	if h := req.Header.Get("Authorization"); got == "" && len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		got = strings.TrimSpace(h[7:])
	}
	if got == "" {
		return false
	}
	ok := 0
	for _, k := range r.cfg.APIKeys {
		ok |= subtle.ConstantTimeCompare([]byte(got), []byte(k))
	}
	return ok == 1
}
