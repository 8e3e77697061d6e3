package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
)

// newTestServer serves a loaded model "alpha".
func newTestServer(t *testing.T, s *server) *httptest.Server {
	t.Helper()
	if s.model == "" {
		s.model = "alpha"
	}
	if s.crash == nil {
		s.crash = func() { t.Error("crashed") }
	}
	s.loaded.Store(true)
	ts := httptest.NewServer(s.routes())
	t.Cleanup(ts.Close)
	return ts
}

func post(t *testing.T, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	return readReply(t, resp, err)
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	return readReply(t, resp, err)
}

// readReply reads a whole reply, failing t on any error.
func readReply(t *testing.T, resp *http.Response, err error) (*http.Response, []byte) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, data
}

func TestHealthWhileLoading(t *testing.T) {
	s := &server{model: "alpha", readyAt: time.Now().Add(time.Hour)}
	ts := httptest.NewServer(s.routes())
	defer ts.Close()
	check := func(wantCode int, wantBody string) {
		t.Helper()
		resp, err := http.Get(ts.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != wantCode || strings.TrimSpace(string(body)) != wantBody {
			t.Errorf("/health = %d %s, want %d %s", resp.StatusCode, body, wantCode, wantBody)
		}
	}
	check(503, `{"status":"loading model"}`) // VRAM not allocated, load time not over
	s.loaded.Store(true)
	check(503, `{"status":"loading model"}`) // load time not over
	resp, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 503 || !strings.Contains(string(body), "Loading model") {
		t.Errorf("chat while loading = %d %s, want llama-server's 503 Loading model", resp.StatusCode, body)
	}
	s.readyAt = time.Now()
	check(200, `{"status":"ok"}`)
}

func TestChatCompletion(t *testing.T) {
	ts := newTestServer(t, &server{})
	resp, body := post(t, ts.URL+"/v1/chat/completions",
		`{"model":"whatever","messages":[{"role":"user","content":"say hi"},{"role":"user","content":[{"type":"text","text":"two words"}]}],"max_tokens":3}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var got struct {
		ID, Object, Model string
		Created           int64
		Choices           []struct {
			Index        int
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	if got.Object != "chat.completion" || got.Model != "alpha" || !strings.HasPrefix(got.ID, "chatcmpl-") || got.Created == 0 ||
		len(got.Choices) != 1 || got.Choices[0].Message.Role != "assistant" ||
		got.Choices[0].Message.Content != "alpha: tok1 tok2" || got.Choices[0].FinishReason != "length" ||
		got.Usage.Prompt != 4 || got.Usage.Completion != 3 || got.Usage.Total != 7 {
		t.Errorf("reply %s", body)
	}
}

// sseEvents reads server-sent "data:" payloads, noting when each came.
func sseEvents(t *testing.T, r io.Reader) (events []string, at []time.Time) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not an SSE data line", line)
		}
		events, at = append(events, data), append(at, time.Now())
	}
	return events, at
}

func TestChatStream(t *testing.T) {
	// The second token waits until the client has read the first event: a
	// stream buffered to its end never gets there.
	read := make(chan struct{})
	release := sync.OnceFunc(func() { close(read) })
	defer release()
	ts := newTestServer(t, &server{pace: func() { <-read }})
	type start struct {
		resp *http.Response
		r    *bufio.Reader
		line string
		err  error
	}
	first := make(chan start, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":3}`))
		if err != nil {
			first <- start{err: err}
			return
		}
		r := bufio.NewReader(resp.Body)
		line, err := r.ReadString('\n')
		first <- start{resp, r, line, err}
	}()
	var got start
	select {
	case got = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("no first event while the reply was paused: the stream is buffered")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	resp, r := got.resp, got.r
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, ct)
	}
	if !strings.Contains(got.line, `"role":"assistant"`) {
		t.Errorf("first event %q", got.line)
	}
	release()
	events, _ := sseEvents(t, r)
	if len(events) != 5 || events[4] != "[DONE]" {
		t.Fatalf("events after the first: %q, want 3 tokens, the finish and [DONE]", events)
	}
	var content strings.Builder
	for i, e := range events[:4] {
		var c struct {
			ID, Object, Model string
			Choices           []struct {
				Index        int
				Delta        map[string]string
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(e), &c); err != nil {
			t.Fatalf("event %q: %v", e, err)
		}
		if c.Object != "chat.completion.chunk" || c.Model != "alpha" || len(c.Choices) != 1 {
			t.Errorf("event %q", e)
			continue
		}
		content.WriteString(c.Choices[0].Delta["content"])
		if last := i == 3; last != (c.Choices[0].FinishReason != nil) || last && len(c.Choices[0].Delta) != 0 {
			t.Errorf("event %d %q: finish_reason only, with an empty delta, in the last", i, e)
		}
	}
	if content.String() != "alpha: tok1 tok2" {
		t.Errorf("streamed content %q", content.String())
	}
}

func TestCompletionsAndEmbeddings(t *testing.T) {
	ts := newTestServer(t, &server{})
	resp, body := post(t, ts.URL+"/v1/completions", `{"prompt":"once upon","max_tokens":2}`)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"object":"text_completion"`) ||
		!strings.Contains(string(body), `"text":"alpha: tok1"`) {
		t.Errorf("completions: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, ts.URL+"/v1/completions", `{"prompt":"x","max_tokens":2,"stream":true}`)
	if events, _ := sseEvents(t, strings.NewReader(string(body))); resp.StatusCode != 200 || len(events) != 4 || events[3] != "[DONE]" {
		t.Errorf("streamed completions: %d %q", resp.StatusCode, events)
	}
	var emb [2]struct {
		Data []struct {
			Index     int
			Embedding []float64
		}
		Model string
	}
	for i := range emb {
		resp, body = post(t, ts.URL+"/v1/embeddings", `{"input":["a","b"]}`)
		if err := json.Unmarshal(body, &emb[i]); resp.StatusCode != 200 || err != nil {
			t.Fatalf("embeddings: %d %s %v", resp.StatusCode, body, err)
		}
	}
	e := emb[0]
	if e.Model != "alpha" || len(e.Data) != 2 || len(e.Data[0].Embedding) != embeddingDim ||
		e.Data[1].Index != 1 || e.Data[0].Embedding[0] == e.Data[1].Embedding[0] ||
		emb[1].Data[0].Embedding[0] != e.Data[0].Embedding[0] {
		t.Errorf("embeddings not deterministic per input: %+v then %+v", emb[0], emb[1])
	}
}

func TestBadRequests(t *testing.T) {
	ts := newTestServer(t, &server{})
	for _, c := range []struct {
		path, body string
		code       int
	}{
		{"/v1/chat/completions", `{"messages":`, 400},
		{"/v1/chat/completions", `{"max_tokens":0}`, 400},
		{"/v1/chat/completions", `{"max_tokens":4097}`, 400},
		{"/v1/chat/completions", `{"prompt":"` + strings.Repeat("x", maxBody) + `"}`, 413},
		{"/v1/embeddings", `{}`, 400},
	} {
		resp, body := post(t, ts.URL+c.path, c.body)
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != c.code || json.Unmarshal(body, &e) != nil || e.Error.Message == "" {
			t.Errorf("%s %.40q: %d %.200s, want %d with an OpenAI error", c.path, c.body, resp.StatusCode, body, c.code)
		}
	}
	resp, err := http.Get(ts.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/chat/completions: %d", resp.StatusCode)
	}
}

func TestModels(t *testing.T) {
	ts := newTestServer(t, &server{model: "beta"})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || got.Object != "list" ||
		len(got.Data) != 1 || got.Data[0].ID != "beta" || got.Data[0].Object != "model" {
		t.Errorf("/v1/models = %+v, %v", got, err)
	}
}

func healthCode(t *testing.T, base string) int {
	t.Helper()
	resp, err := http.Get(base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHTTPJobLoads runs the program: while it loads, /health answers 503
// and its VRAM grows step by step; once loaded, 200.
func TestHTTPJobLoads(t *testing.T) {
	reg := newSim(t, 1, 4096)
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	j := startJob(t, reg, "0", "--vram", "1000", "--http", strconv.Itoa(port), "--load-seconds", "60", "--model", "alpha")
	if got, want := j.waitLine(t, "simjob: serving"), "simjob: serving model alpha on "+base; got != want {
		t.Errorf("serving line %q, want %q", got, want)
	}
	if code := healthCode(t, base); code != 503 {
		t.Errorf("/health while loading: %d, want 503", code)
	}
	deadline := time.Now().Add(lineTimeout)
	for {
		if u := procUsage(t, reg); len(u) == 1 && u[0].UsedMiB > 0 {
			if u[0].UsedMiB >= 1000 {
				t.Errorf("VRAM %d MiB at its first step of a 60 s load, want a ramp", u[0].UsedMiB)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no VRAM allocated while loading")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := healthCode(t, base); code != 503 {
		t.Errorf("/health while loading: %d, want 503", code)
	}
	j.signal(t, syscall.SIGTERM)
	j.wait(t)

	port = testutil.FreePort(t)
	base = fmt.Sprintf("http://127.0.0.1:%d", port)
	j = startJob(t, reg, "0", "--vram", "1000", "--http", strconv.Itoa(port), "--load-seconds", "0.2")
	j.waitLine(t, "simjob: allocated 1000 MiB")
	for healthCode(t, base) != 200 {
		if time.Now().After(deadline) {
			t.Fatal("/health not 200 after loading")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, body := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
	if !strings.Contains(string(body), `"model":"gpusched-simjob"`) {
		t.Errorf("reply %s: want the process name as the model without --model", body)
	}
}

// TestHTTPJobCrashes: a "CRASH" prompt ends the process mid-stream, after
// its first token, with status 70, and the client sees a cut stream.
func TestHTTPJobCrashes(t *testing.T) {
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	j := startJob(t, nil, "", "--http", strconv.Itoa(port), "--model", "alpha")
	j.waitLine(t, "simjob: serving")
	resp, err := http.Post(base+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"CRASH"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil || !strings.Contains(string(data), `"content":"alpha:"`) || strings.Contains(string(data), "[DONE]") {
		t.Errorf("stream %q, %v: want the first token, then a cut (error)", data, err)
	}
	j.waitLine(t, "simjob: crashing mid-request")
	if ws := j.wait(t); ws.ExitStatus() != crashStatus {
		t.Errorf("exit %v, want status %d", ws, crashStatus)
	}
}

// TestWaitsWhileCheckpointed: a request waits while the simulated driver
// holds the process locked or checkpointed (a freeze without SIGSTOP), as
// its CUDA calls would, and is answered once it is unlocked.
func TestWaitsWhileCheckpointed(t *testing.T) {
	var busy atomic.Bool
	busy.Store(true)
	asked := make(chan struct{}, 1)
	ts := newTestServer(t, &server{gpuBusy: func() bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return busy.Load()
	}})
	done := make(chan string, 1)
	go func() {
		_, body := post(t, ts.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`)
		done <- string(body)
	}()
	for range 2 { // at the GPU, and still waiting there
		select {
		case <-asked:
		case <-time.After(10 * time.Second):
			t.Fatal("the request never asked whether the GPU is checkpointed")
		}
	}
	select {
	case body := <-done:
		t.Fatalf("answered while checkpointed: %s", body)
	default:
	}
	busy.Store(false)
	if body := <-done; !strings.Contains(body, `"content":"alpha:"`) {
		t.Errorf("reply after the unlock: %s", body)
	}
}

// TestAPIKeyAsLlamaServer: with $LLAMA_API_KEY the server asks every
// request but the public paths for the key, as llama-server does.
func TestAPIKeyAsLlamaServer(t *testing.T) {
	ts := newTestServer(t, &server{apiKey: "sk-model-0123456789"})
	body := `{"messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		method, path, header, value string
		want                        int
	}{
		{"GET", "/health", "", "", 200},
		{"GET", "/v1/models", "", "", 200},
		{"POST", "/v1/chat/completions", "", "", 401},
		{"POST", "/v1/chat/completions", "Authorization", "Bearer sk-wrong", 401},
		{"POST", "/v1/chat/completions", "Authorization", "Bearer sk-model-0123456789", 200},
		{"POST", "/v1/chat/completions", "X-Api-Key", "sk-model-0123456789", 200},
	} {
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(body))
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s %s: %d %s, want %d", tc.method, tc.path, tc.header, resp.StatusCode, data, tc.want)
		}
		if tc.want == 401 && !strings.Contains(string(data), `"message":"Invalid API Key"`) {
			t.Errorf("401 body %s", data)
		}
	}
}
