package router

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/gpusched/gpusched/internal/limits"
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

// mayUnload says whether the local user uid may freeze models with
// /unload: root and the router's own user (who may freeze them through
// the daemon anyway) and unload_users. Any other local user could
// otherwise freeze a model between every request of everyone else's, each
// of which would then wait for its thaw: the router would freeze its own
// processes for them, which the daemon lets no other user do.
func (r *Router) mayUnload(uid uint32) bool {
	if r.cfg.UnloadAnyone {
		return true
	}
	if uid == limits.AnyPeer {
		return false
	}
	if uid == 0 || uid == uint32(os.Getuid()) {
		return true
	}
	return slices.Contains(r.cfg.UnloadUIDs, uid)
}

// unloadRefusal is the 403's message for uid.
func unloadRefusal(uid uint32) string {
	who := fmt.Sprintf("your user (uid %d) is not", uid)
	if uid == limits.AnyPeer {
		who = "the router cannot tell which local user you are (a client on another host, or no sock_diag), and unload_users does not hold \"*\""
	}
	return fmt.Sprintf("/unload freezes models everyone uses: it is for root, the router's own user (uid %d) and unload_users; %s", os.Getuid(), who)
}
