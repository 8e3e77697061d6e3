package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSlotsFirstComeFirstServed: with every slot busy, requests wait in
// arrival order, as llama-server's deferred tasks do; one whose client
// hangs up leaves the queue.
func TestSlotsFirstComeFirstServed(t *testing.T) {
	s := newSlots(1)
	done, err := s.take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	gone, hangUp := context.WithCancel(context.Background())
	for i := range 3 {
		ctx := context.Background()
		if i == 1 {
			ctx = gone
		}
		go func() {
			if put, err := s.take(ctx); err == nil {
				order <- i
				put()
			} else {
				order <- -1
			}
		}()
		waitQueued(t, s, i+1)
	}
	hangUp()
	if got := <-order; got != -1 {
		t.Fatalf("a request ended before the hung-up one gave up: %d", got)
	}
	done()
	if a, b := <-order, <-order; a != 0 || b != 2 {
		t.Fatalf("served %d then %d; want 0 then 2 (1 hung up)", a, b)
	}
}

// waitQueued waits until n requests wait for a slot.
func waitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued := len(s.waiting)
		s.mu.Unlock()
		if queued == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d requests wait for a slot; want %d", queued, n)
		}
	}
}

// TestParallelHoldsOthersBack: with --parallel 1 a second request waits
// for the first one's whole reply before it generates.
func TestParallelHoldsOthersBack(t *testing.T) {
	step := make(chan struct{})
	s := &server{slots: newSlots(1), pace: func() { <-step }}
	ts := newTestServer(t, s)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := bufio.NewReader(resp.Body)
	if l, err := first.ReadString('\n'); err != nil || !strings.HasPrefix(l, "data: ") {
		t.Fatalf("first stream: %q %v", l, err)
	}
	second := make(chan string, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			second <- err.Error()
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		second <- string(body)
	}()
	waitQueued(t, s.slots, 1)
	if resp, body := get(t, ts.URL+"/slots"); resp.StatusCode != 200 || string(bytes.TrimSpace(body)) != `[{"id":0,"id_task":0,"is_processing":true}]` {
		t.Errorf("GET /slots while the first generates: %d %s", resp.StatusCode, body)
	}
	close(step) // the first stream's last token, then data: [DONE]
	if _, err := first.ReadString(']'); err != nil {
		t.Fatal(err)
	}
	if got := <-second; !strings.Contains(got, `"chat.completion"`) {
		t.Fatalf("second request: %s", got)
	}
}

// TestPropsTellsTheSlots: GET /props answers total_slots, --parallel's
// number, as llama-server's does; without --parallel the stand-in has no
// number to give and no /props (404, as vLLM).
func TestPropsTellsTheSlots(t *testing.T) {
	ts := newTestServer(t, &server{slots: newSlots(3)})
	resp, body := get(t, ts.URL+"/props")
	var props struct {
		TotalSlots int    `json:"total_slots"`
		ModelPath  string `json:"model_path"`
	}
	if err := json.Unmarshal(body, &props); resp.StatusCode != 200 || err != nil || props.TotalSlots != 3 || props.ModelPath != "alpha" {
		t.Errorf("GET /props at --parallel 3: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, newTestServer(t, &server{}).URL+"/props"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /props without --parallel: %d %s; want 404", resp.StatusCode, body)
	}
}
