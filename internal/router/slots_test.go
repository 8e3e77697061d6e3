package router

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// TestTakeSlotAnswersWhatEndsItsWait: a request waiting for a slot whose
// turn ends is answered 503 turn_over, as one cut in flight; one whose
// client hangs up is counted 499 and answered nothing; a GET (health,
// props) needs no slot.
func TestTakeSlotAnswersWhatEndsItsWait(t *testing.T) {
	cfg := &Config{TurnTimeout: time.Minute, Models: map[string]*Model{
		"alpha": {Name: "alpha", Cmd: []string{"serve"}, Health: DefaultHealth, Slots: 1},
	}}
	r := New(cfg, nil, zap.NewNop())
	m := r.models["alpha"]
	busy, err := m.slots.Take(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer busy()
	wait := func(method string, end func(context.CancelCauseFunc)) (*httptest.ResponseRecorder, *statusWriter, bool) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		req := httptest.NewRequestWithContext(ctx, method, "/v1/chat/completions", nil)
		rec := httptest.NewRecorder()
		w := &statusWriter{ResponseWriter: rec}
		go func() {
			for m.slots.Waiting() == 0 && method == http.MethodPost {
				time.Sleep(time.Millisecond)
			}
			end(cancel)
		}()
		release, ok := r.takeSlot(w, req, m)
		if ok {
			release()
		}
		return rec, w, ok
	}
	rec, w, ok := wait(http.MethodPost, func(cancel context.CancelCauseFunc) { cancel(errTurnOver) })
	if ok || w.code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "turn_over") {
		t.Errorf("turn ended while waiting: passed %v, %d %s", ok, w.code, rec.Body.String())
	}
	rec, w, ok = wait(http.MethodPost, func(cancel context.CancelCauseFunc) { cancel(nil) })
	if ok || w.code != 499 || rec.Body.Len() != 0 {
		t.Errorf("client gone while waiting: passed %v, %d %q", ok, w.code, rec.Body.String())
	}
	if _, _, ok := wait(http.MethodGet, func(context.CancelCauseFunc) {}); !ok {
		t.Error("a GET waited for a slot")
	}
	if n := m.slots.Waiting(); n != 0 {
		t.Errorf("%d requests still wait", n)
	}
}
