package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// wantReply is in the reply of a model server's ask.
const wantReply = `"content":"alpha: tok1"`

// TestHTTPFrozenThroughDaemon: the model server, frozen to RAM and thawed,
// serves again, and a request sent while it is frozen is answered after
// the thaw.
func TestHTTPFrozenThroughDaemon(t *testing.T) {
	c, ask := startModelServer(t, "none")
	ctx := context.Background()
	if _, err := c.Freeze(ctx, api.FreezeParams{Name: "alpha"}); err != nil {
		t.Fatal(err)
	}
	answered := make(chan string, 1)
	go func() { answered <- ask() }()
	if _, err := c.Thaw(ctx, api.ThawParams{Name: "alpha"}); err != nil {
		t.Fatal(err)
	}
	if got := <-answered; !strings.HasPrefix(got, "200 ") || !strings.Contains(got, wantReply) {
		t.Errorf("request sent while frozen, after the thaw: %s", got)
	}
	if got := ask(); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, wantReply) {
		t.Errorf("request after the thaw: %s", got)
	}
}

// TestHTTPHibernatedThroughDaemon: hibernated to disk with CRIU (its
// listening socket imaged) and thawed from there, the model server serves
// again.
func TestHTTPHibernatedThroughDaemon(t *testing.T) {
	c, ask := startModelServer(t, testutil.CRIU(t))
	ctx := context.Background()
	_, err := c.Hibernate(ctx, api.HibernateParams{Name: "alpha"})
	if api.CodeOf(err) == api.CodeUnavailable && strings.Contains(err.Error(), "network socket") {
		// CRIU before 4.2 fails on any network socket on Linux 6.16 and
		// later (criu#2718); without inet_diag it cannot image one either.
		t.Skipf("this kernel's CRIU cannot image a listening TCP socket: %v", err)
	}
	if err != nil {
		t.Fatalf("hibernate: %v", err)
	}
	th, err := c.Thaw(ctx, api.ThawParams{Name: "alpha"})
	if err != nil {
		t.Fatal(err)
	}
	if th.Snapshot == "" {
		t.Errorf("thaw after hibernate did not restore from disk: %+v", th)
	}
	if got := ask(); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, wantReply) {
		t.Errorf("request after the thaw from disk: %s", got)
	}
}

// startModelServer runs a daemon on a simulated 24 GiB GPU (with criu as
// its --criu) and the model server alpha in it, as a managed process of an
// unprivileged user, and returns once it is healthy and has answered. ask
// sends a chat request and returns "STATUS BODY" or the client's error.
func startModelServer(t *testing.T, criu string) (c *api.Client, ask func() string) {
	t.Helper()
	bins := testutil.Build(t)
	user := testutil.NewUser(t, "gssimhttp", "gssimhttptest")
	var stderr bytes.Buffer // read once the daemon has exited
	t.Cleanup(func() {      // after the daemon has stopped
		if t.Failed() {
			t.Logf("daemon stderr:\n%s", stderr.String())
		}
	})
	d := testutil.StartSimDaemon(t, bins, testutil.ShortDir(t), "1x24G", user.Group, &stderr, "--criu", criu)

	ctx := context.Background()
	c, err := api.Dial(ctx, d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	port := testutil.FreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if _, err := c.Run(ctx, api.RunParams{Name: "alpha", Dir: "/", User: user.Name,
		Cmd: []string{bins.SimJob, "--http", fmt.Sprint(port), "--vram", "13000", "--model", "alpha", "--load-seconds", "0.2"}}); err != nil {
		t.Fatal(err)
	}

	// No keep-alive: an idle connection is an established socket, which a
	// dump would have to carry.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	ask = func() string {
		resp, err := client.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"alpha","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := client.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health not 200 within a minute: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := ask(); !strings.HasPrefix(got, "200 ") || !strings.Contains(got, wantReply) {
		t.Fatalf("first request: %s", got)
	}

	return c, ask
}
