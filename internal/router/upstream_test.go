package router

import "testing"

// TestOpenUpstream: every client may reach a model server's generation
// endpoints and GETs of its health, models, props and metrics, and
// nothing else: not its slots, adapters or settings, not another method
// on an open path, not a path that only looks like one.
func TestOpenUpstream(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		open         bool
	}{
		{"GET", "/health", true},
		{"HEAD", "/v1/models", true},
		{"GET", "/props", true},
		{"GET", "/metrics", true},
		{"POST", "/v1/chat/completions", true},
		{"POST", "/completion", true},
		{"POST", "/tokenize", true},
		{"POST", "/v1/embeddings", true},
		{"GET", "/slots", false},
		{"POST", "/slots/0", false},
		{"POST", "/lora-adapters", false},
		{"GET", "/lora-adapters", false},
		{"POST", "/props", false},
		{"POST", "/reset_prefix_cache", false},
		{"POST", "/sleep", false},
		{"POST", "/v1/load_lora_adapter", false},
		{"POST", "/v1/chat/completions/", false},
		{"PUT", "/v1/chat/completions", false},
		{"DELETE", "/v1/models", false},
		{"OPTIONS", "/health", false},
		{"POST", "/health", false},
	} {
		if got := openUpstream(tc.method, tc.path); got != tc.open {
			t.Errorf("openUpstream(%s %s) = %v, want %v", tc.method, tc.path, got, tc.open)
		}
	}
}
