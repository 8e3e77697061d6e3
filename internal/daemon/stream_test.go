package daemon

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestHalfClosedPeerStillGetsItsStream is `echo '{"method":"wait",...}' |
// socat -t 60 - UNIX-CONNECT:...`: the peer shuts down its write side after
// the request and must still receive the stream to its end.
func TestHalfClosedPeerStillGetsItsStream(t *testing.T) {
	h := newHarness(t)
	h.run("napper", "sleep", "1000")
	rc := h.raw()
	rc.send(`{"id":"w","method":"wait","params":{"name":"napper"}}`)
	rc.c.(*net.UnixConn).CloseWrite()
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "napper", Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	for {
		m := rc.recv()
		if _, ok := m["event"]; ok {
			continue
		}
		if m["ok"] != true || m["id"] != "w" {
			t.Fatalf("final line %v", m)
		}
		return
	}
}

// TestOversizeLineDuringStreamKeepsConnection sends a huge line while a wait
// is streaming: the wait finishes normally, the huge line is refused, and
// the connection serves further streams.
func TestOversizeLineDuringStreamKeepsConnection(t *testing.T) {
	h := newHarness(t)
	h.run("napper", "sleep", "1000")
	rc := h.raw()
	rc.send(`{"id":1,"method":"wait","params":{"name":"napper"}}`)
	rc.send(`{"method":"ps","params":{"pad":"` + strings.Repeat("x", api.MaxLineBytes) + `"}}`)
	h.client().Kill(ctxT(t), api.KillParams{Name: "napper", Signal: "KILL"})
	var got []string
	for len(got) < 2 {
		m := rc.recv()
		if _, ok := m["event"]; ok {
			continue
		}
		code, _ := m["code"].(string)
		got = append(got, fmt.Sprintf("%s/%v", code, m["ok"]))
	}
	if got[0] != "/true" || got[1] != "too_large/false" {
		t.Fatalf("answers %v: want the wait's result, then too_large", got)
	}
	rc.send(`{"id":2,"method":"wait","params":{"name":"napper"}}`)
	if m := rc.recv(); m["ok"] != true {
		t.Fatalf("second wait on the same connection: %v", m)
	}
}

// TestShutdownEndsStreamsWithAFinalLine stops the daemon under an events
// stream and a log follow: each ends with an `unavailable` line, so a
// client can tell a clean shutdown from a crash.
func TestShutdownEndsStreamsWithAFinalLine(t *testing.T) {
	h := newHarness(t)
	h.run("napper", "sh", "-c", "echo up; exec sleep 1000")
	events, follow := h.raw(), h.raw()
	events.send(`{"id":"e","method":"events"}`)
	follow.send(`{"id":"f","method":"logs","params":{"name":"napper","follow":true}}`)
	for _, rc := range []*rawConn{events, follow} {
		if m := rc.recv(); m["event"] == nil { // subscribed / the "up" line: the stream runs
			t.Fatalf("first line %v", m)
		}
	}
	h.stop()
	for _, rc := range []*rawConn{events, follow} {
		for {
			m := rc.recv()
			if _, ok := m["event"]; ok {
				continue
			}
			if m["ok"] != false || m["code"] != string(api.CodeUnavailable) {
				t.Fatalf("final line %v, want unavailable", m)
			}
			break
		}
	}
}
