package router

import (
	"os"
	"strings"
	"testing"
)

// TestDocsNameEverything: docs/router.md documents every metric and every
// config key the router has.
func TestDocsNameEverything(t *testing.T) {
	doc, err := os.ReadFile("../../docs/router.md")
	if err != nil {
		t.Fatal(err)
	}
	m := newMetrics()
	m.requests.WithLabelValues("x", "200")
	m.inflight.WithLabelValues("x")
	m.waiting.WithLabelValues("x")
	m.queued.WithLabelValues("x")
	m.waitSeconds.WithLabelValues("x")
	m.wakeSeconds.WithLabelValues("x", "cold")
	m.wakeFailures.WithLabelValues("x")
	m.unloads.WithLabelValues("x")
	m.turnCuts.WithLabelValues("x")
	m.slotCuts.WithLabelValues("x")
	m.upstreamErrs.WithLabelValues("x")
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 11 {
		t.Errorf("%d metric families, want 11: a new one needs a line here", len(families))
	}
	for _, f := range families {
		if !strings.Contains(string(doc), "`"+f.GetName()+"`") {
			t.Errorf("docs/router.md does not document metric %s", f.GetName())
		}
	}
	for _, key := range []string{"api_keys", "start_timeout", "max_body", "cmd", "port", "gpus", "vram", "health", "ttl", "hibernate", "aliases", "preload", "unload_users", "turn_timeout", "model_key", "model_key_env", "slots", "upstream_users"} {
		if !strings.Contains(string(doc), "| `"+key+"` |") {
			t.Errorf("docs/router.md has no row for config key %s", key)
		}
	}
}
