package api

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeServer answers each request line with the canned lines of its method.
func fakeServer(t *testing.T, replies map[string][]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "api")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					for m, lines := range replies {
						if strings.Contains(line, `"method":"`+m+`"`) {
							for _, l := range lines {
								c.Write([]byte(l + "\n"))
							}
						}
					}
				}
			}()
		}
	}()
	return path
}

// TestDialMissingDaemonSaysHowToStartIt: the start command it suggests
// serves the socket that was asked for.
func TestDialMissingDaemonSaysHowToStartIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "none.sock")
	_, err := Dial(context.Background(), path)
	if !errors.Is(err, ErrDaemonNotRunning) || !strings.Contains(err.Error(), "gpuschedd --socket "+path+" --sim 1") {
		t.Fatalf("err = %v", err)
	}
	if hint := startHint(DefaultSocket); !strings.Contains(hint, "`gpuschedd --sim 1`") || !strings.Contains(hint, "systemctl start gpuschedd") {
		t.Errorf("hint for the default socket: %s", hint)
	}
}

func TestCallMapsCodesAndDecodesResults(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	path := fakeServer(t, map[string][]string{
		"status": {`{"id":1,"ok":false,"error":"process \"x\" not found","code":"not_found"}`},
		"ps":     {`{"id":2,"ok":true,"result":{"processes":[{"name":"` + long + `"}]}}`},
		"wait": {
			`{"id":3,"event":{"type":"process","name":"w","state":"running"}}`,
			`{"id":3,"event":{"type":"process","name":"w","state":"exited"}}`,
			`{"id":3,"ok":true,"result":{"name":"w","state":"exited"}}`,
		},
	})
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Process(context.Background(), "x")
	if !IsNotFound(err) || err.Error() != `process "x" not found` {
		t.Fatalf("status: %v", err)
	}
	ps, err := c.PS(context.Background(), PSParams{})
	if err != nil || len(ps) != 1 || ps[0].Name != long {
		t.Fatalf("ps with a 200 KiB line: %v", err)
	}
	var states []State
	p, err := c.Wait(context.Background(), WaitParams{Name: "w"}, func(e *Event) error { states = append(states, e.State); return nil })
	if err != nil || p.State != StateExited || len(states) != 2 {
		t.Fatalf("wait: %+v %v %v", p, states, err)
	}
}

func TestCanceledCallLeavesClientUnusable(t *testing.T) {
	path := fakeServer(t, map[string][]string{}) // never answers
	c, err := Dial(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Status(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline", err)
	}
	if _, err := c.Status(context.Background()); err == nil || !strings.Contains(err.Error(), "unusable") {
		t.Fatalf("second call on a broken connection: %v", err)
	}
}

// TestRefusedConnectionSaysWhy: a daemon that answers a new connection
// with an error line and closes it before any request (a cap reached)
// gives that error to the call whose request could no longer be sent.
func TestRefusedConnectionSaysWhy(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(dir, "s.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	refused := make(chan struct{})
	go func() {
		defer close(refused)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte(`{"ok":false,"error":"user alice has 4 connections open, the most --max-conns-per-user allows","code":"resource_exhausted"}` + "\n"))
		c.Close()
	}()
	c, err := Dial(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	<-refused // the request is sent to a closed connection
	_, err = c.Status(context.Background())
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeResourceExhausted || !strings.Contains(e.Message, "--max-conns-per-user") {
		t.Fatalf("call on a refused connection: %v", err)
	}
}
