package router

import (
	"context"
	"fmt"
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
	busy, err := m.slots.Take(context.Background(), 1000, 0, nil)
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
		release, ok := r.takeSlot(w, req, m, &lease{r: r, m: m})
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

// TestCutSlotHog: a request that waited a turn for a slot cuts one held
// by the user holding the most slots, more than its own user holds, the
// one held longest; never one already cut, never one of a user holding
// no more than the waiter's.
func TestCutSlotHog(t *testing.T) {
	start := time.Now()
	type holder struct {
		uid uint32
		at  int // seconds after start it took its slot
	}
	for _, tc := range []struct {
		name    string
		holders []holder
		waiter  uint32
		cut     []int // indexes of holders cut by two calls, in order
	}{
		{"the hog's oldest, then the longest held", []holder{{1, 2}, {1, 1}, {3, 0}}, 2, []int{1, 2}},
		{"the user holding most", []holder{{1, 0}, {3, 1}, {3, 2}}, 2, []int{1, 0}},
		{"one slot: turns", []holder{{1, 0}}, 2, []int{0}},
		{"as many as the waiter: none", []holder{{1, 0}, {2, 1}}, 2, nil},
		{"the waiter's own: never", []holder{{2, 0}, {2, 1}}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &Config{TurnTimeout: time.Minute, Models: map[string]*Model{
				"alpha": {Name: "alpha", Cmd: []string{"serve"}, Health: DefaultHealth, Slots: 4},
			}}
			r := New(cfg, nil, zap.NewNop())
			m := r.models["alpha"]
			var cut []int
			for i, h := range tc.holders {
				l := &lease{r: r, m: m, slotUID: h.uid, slotSince: start.Add(time.Duration(h.at) * time.Second), holdsSlot: true}
				l.cancel = func(why *cutCause) {
					if why != errSlotOver {
						t.Errorf("cut with %v", why)
					}
					cut = append(cut, i)
				}
				m.leases[l] = struct{}{}
			}
			r.cutSlotHog(m, tc.waiter)
			r.cutSlotHog(m, tc.waiter)
			if fmt.Sprint(cut) != fmt.Sprint(tc.cut) && !(len(cut) == 0 && len(tc.cut) == 0) {
				t.Errorf("cut %v, want %v", cut, tc.cut)
			}
		})
	}
}
