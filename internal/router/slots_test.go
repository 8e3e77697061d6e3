package router

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/limits"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestTakeSlotAnswersWhatEndsItsWait: a request waiting for a slot whose
// turn ends is answered 503 turn_over, as one cut in flight; one whose
// client hangs up is counted 499 and answered nothing; a GET (health,
// props) and a POST the server answers without a slot (its tokenizer)
// need none.
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
	wait := func(method, path string, end func(context.CancelCauseFunc)) (*httptest.ResponseRecorder, *statusWriter, bool) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		req := httptest.NewRequestWithContext(ctx, method, path, nil)
		rec := httptest.NewRecorder()
		w := &statusWriter{ResponseWriter: rec}
		go func() {
			for m.slots.Waiting() == 0 {
				if ctx.Err() != nil {
					return // passed at once
				}
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
	rec, w, ok := wait(http.MethodPost, "/v1/chat/completions", func(cancel context.CancelCauseFunc) { cancel(errTurnOver) })
	if ok || w.code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "turn_over") {
		t.Errorf("turn ended while waiting: passed %v, %d %s", ok, w.code, rec.Body.String())
	}
	rec, w, ok = wait(http.MethodPost, "/v1/chat/completions", func(cancel context.CancelCauseFunc) { cancel(nil) })
	if ok || w.code != 499 || rec.Body.Len() != 0 {
		t.Errorf("client gone while waiting: passed %v, %d %q", ok, w.code, rec.Body.String())
	}
	endWait := func(cancel context.CancelCauseFunc) { cancel(errTurnOver) }
	if _, _, ok := wait(http.MethodGet, "/health", endWait); !ok {
		t.Error("a GET waited for a slot")
	}
	for _, path := range []string{"/tokenize", "/detokenize", "/apply-template"} {
		if _, _, ok := wait(http.MethodPost, path, endWait); !ok {
			t.Errorf("POST %s waited for a slot", path)
		}
	}
	if n := m.slots.Waiting(); n != 0 {
		t.Errorf("%d requests still wait", n)
	}
}

// TestPropsSlots: a server's total_slots is taken only from a 200 whose
// JSON gives a number 1-65536, read within propsMax; anything else leaves
// the model's slots as they were.
func TestPropsSlots(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   int // 0: an error
	}{
		{"llama-server's", 200, `{"default_generation_settings": {"n_ctx": 4096}, "total_slots": 3, "model_path": "m.gguf"}`, 3},
		{"none", 200, `{"model_path": "m.gguf"}`, 0},
		{"zero", 200, `{"total_slots": 0}`, 0},
		{"too many", 200, `{"total_slots": 65537}`, 0},
		{"not a number", 200, `{"total_slots": "4"}`, 0},
		{"not JSON", 200, `slots: 4`, 0},
		{"past propsMax", 200, `{"chat_template": "` + strings.Repeat("x", propsMax) + `", "total_slots": 2}`, 0},
		{"key refused", 401, `{"error": {"code": 401, "message": "Invalid API Key"}}`, 0},
		{"no /props (vLLM)", 404, `{"detail": "Not Found"}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Path != "/props" || req.Header.Get("Authorization") != "Bearer k" {
					t.Errorf("asked %s with %q; want /props with the model key", req.URL.Path, req.Header.Get("Authorization"))
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			port, _ := strconv.Atoi(srv.URL[strings.LastIndex(srv.URL, ":")+1:])
			cfg := &Config{ModelKey: "k", Models: map[string]*Model{"alpha": {Name: "alpha", Cmd: []string{"serve"}, Port: port, Health: DefaultHealth}}}
			r := New(cfg, nil, zap.NewNop())
			m := r.models["alpha"]
			n, err := r.propsSlots(context.Background(), m)
			if tc.want == 0 && err == nil || tc.want != 0 && (err != nil || n != tc.want) {
				t.Fatalf("%d, %v; want %d", n, err, tc.want)
			}
			r.learnSlots(context.Background(), m)
			if want := cmp.Or(tc.want, maxSlots); m.slots.Places() != want {
				t.Errorf("learned %d slots; want %d", m.slots.Places(), want)
			}
		})
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

// runningDaemon has every model running: a wake is a hold.
type runningDaemon struct{ Daemon }

func (runningDaemon) Process(_ context.Context, name string) (*api.Process, error) {
	return &api.Process{Name: name, State: api.StateRunning}, nil
}

func (runningDaemon) Hold(context.Context, string, []string) (Hold, error) { return heldRunning{}, nil }

type heldRunning struct{}

func (heldRunning) Was() api.State { return api.StateRunning }
func (heldRunning) Close() error   { return nil }

// TestSlotBackOnceTheReplyIsWhole: a reply that is not a stream is read
// whole before it is passed on, and its slot goes back then: the server
// is done, and a client that reads it slowly, or not at all, holds the
// slot no longer.
func TestSlotBackOnceTheReplyIsWhole(t *testing.T) {
	reply := bytes.Repeat([]byte("x"), 15<<20) // past what the sockets buffer, within maxBuffered
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	}))
	defer server.Close()
	port, _ := strconv.Atoi(server.URL[strings.LastIndexByte(server.URL, ':')+1:])
	cfg := &Config{TurnTimeout: time.Minute, StartTimeout: time.Minute, MaxBody: DefaultMaxBody,
		BodyBudget: DefaultBodyBudget, BodyPerUser: DefaultBodyPerUser, Models: map[string]*Model{
			"alpha": {Name: "alpha", Cmd: []string{"serve"}, Port: port, Health: DefaultHealth, Slots: 1},
		}}
	r := New(cfg, runningDaemon{}, zap.NewNop())
	front := httptest.NewServer(r.Handler())
	defer front.Close()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"alpha","messages":[]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	m := r.models["alpha"]
	inflight := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return m.inflight
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if inflight() == 1 && m.slots.Held(limits.AnyPeer) == 0 {
			break // still being written to the client, its slot back
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reply read whole and its client reading none of it: %d in flight, slot held %d; want its slot back", inflight(), m.slots.Held(limits.AnyPeer))
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, reply) {
		t.Fatalf("the reply: %v, %d bytes of %d", err, len(got), len(reply))
	}
}
