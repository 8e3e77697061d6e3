package router_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// connFlood, run as a local user, opens 16 connections to the router at
// 127.0.0.1:PORT, each asking for /health once and kept open, and prints
// each answer's status line; on a line on stdin it reads each connection
// the router answered until the router closes it (its idle timeout),
// printing "closed" for each.
const connFlood = `
import socket, sys
port = int(sys.argv[1])
req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
kept = []
for i in range(16):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(req)
    line = s.recv(4096).split(b"\r\n")[0].decode()
    print(line, flush=True)
    if " 200 " in line:
        kept.append(s)
print("holding", flush=True)
sys.stdin.readline()
for s in kept:
    s.settimeout(60)
    print("closed" if s.recv(4096) == b"" else "answered", flush=True)
`

// TestRedTeamRouterConnsPerUser: any local user may connect to the
// router, and one who held connections without end took all it may have
// open (every descriptor of the router's: 18,000 kept-alive connections
// after one /health each, 2026-11-28, left it failing every accept with
// "too many open files" and its RSS at 394 MB). Now one user holds at most
// max_conns_per_user of max_conns: the rest are answered 503 and closed
// at once, another user is served meanwhile (without the share the flood
// holds all 16 and the other user's request waits unanswered), and kept-
// alive connections left idle are closed after idle_timeout.
func TestRedTeamRouterConnsPerUser(t *testing.T) {
	g := newRig(t, "1x24G")
	flooder := testutil.NewUser(t, "gsrflood", "gsrfloodg")
	g.startRouter("max_conns = 16\nmax_conns_per_user = 4\nidle_timeout = \"5s\"\n" + g.simModel("alpha", 1024))
	port := strings.TrimPrefix(g.url, "http://127.0.0.1:")
	stdin, lines := testutil.PythonAs(t, flooder, connFlood, port)
	answers := map[string]int{}
	for lines.Scan() && lines.Text() != "holding" {
		answers[lines.Text()]++
	}
	if answers["HTTP/1.1 200 OK"] != 4 || answers["HTTP/1.1 503 Service Unavailable"] != 12 {
		t.Fatalf("one user's 16 connections were answered %v; want 4 served and 12 refused (503)", answers)
	}
	// Another local user (not root, whose reserve would let it in anyway).
	if got, err := testutil.PythonOutputAs(g.user, `import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=10).status)`, g.url); err != nil || got != "200" {
		t.Fatalf("another user's /health while one user holds their share: %v %s", err, got)
	}
	fmt.Fprintln(stdin)
	closed := 0
	for lines.Scan() {
		if lines.Text() == "closed" {
			closed++
		}
	}
	if closed != 4 {
		t.Fatalf("%d of the user's 4 idle connections closed by the router; want all after idle_timeout", closed)
	}
}

// bodyHold, run as a local user, sends three requests declaring bodies of
// 1 MiB and sends none of the bodies; it prints the one answered (the
// other two wait for their bodies), and on a line on stdin sends the two
// bodies and a fourth whole request, printing their answers.
const bodyHold = `
import select, socket, sys
port = int(sys.argv[1])
hdr = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n"
socks = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(hdr)
    socks.append(s)
ready, _, _ = select.select(socks, [], [], 60)
print(len(ready), ready[0].recv(65536).split(b"\r\n")[0].decode() if ready else "none", flush=True)
print("holding", flush=True)
sys.stdin.readline()
for s in socks:
    if s not in ready:
        s.sendall(b" " * 1048576)
        print(s.recv(65536).split(b"\r\n")[0].decode(), flush=True)
s = socket.create_connection(("127.0.0.1", port))
s.sendall(hdr + b" " * 1048576)
print(s.recv(65536).split(b"\r\n")[0].decode(), flush=True)
`

// TestRedTeamRouterBodyBudget: the router holds a request's body whole
// until it is answered, which may take a wake's minutes: one user's
// requests could hold max_body (32 MiB) each, on every connection they
// may have. Now a request whose declared body would take its user past
// body_budget_per_user is answered 503 at once, before its body is read,
// while another user's request is read and answered; bodies answered
// give their bytes back.
func TestRedTeamRouterBodyBudget(t *testing.T) {
	g := newRig(t, "1x24G")
	holder := testutil.NewUser(t, "gsrbody", "gsrbodyg")
	g.startRouter("max_body = \"1M\"\nbody_budget = \"64M\"\nbody_budget_per_user = \"2M\"\n" + g.simModel("alpha", 1024))
	port := strings.TrimPrefix(g.url, "http://127.0.0.1:")
	stdin, lines := testutil.PythonAs(t, holder, bodyHold, port)
	if !lines.Scan() || lines.Text() != "1 HTTP/1.1 503 Service Unavailable" {
		t.Fatalf("one user's three requests of 1 MiB under a share of 2 MiB: %q; want one answered 503 at once", lines.Text())
	}
	if !lines.Scan() || lines.Text() != "holding" {
		t.Fatalf("%q", lines.Text())
	}
	if got, err := testutil.PythonOutputAs(g.user, `import sys, urllib.request, urllib.error
try:
    urllib.request.urlopen(urllib.request.Request(sys.argv[1] + "/v1/chat/completions", data=b'{"model": "nope"}', headers={"Content-Type": "application/json"}), timeout=10)
except urllib.error.HTTPError as e:
    print(e.code)`, g.url); err != nil || got != "404" {
		t.Fatalf("another user's request while one user holds their share: %v %s; want it read and answered (404, no such model)", err, got)
	}
	fmt.Fprintln(stdin)
	var answers []string
	for lines.Scan() {
		answers = append(answers, lines.Text())
	}
	if want := []string{"HTTP/1.1 400 Bad Request", "HTTP/1.1 400 Bad Request", "HTTP/1.1 400 Bad Request"}; strings.Join(answers, "|") != strings.Join(want, "|") {
		t.Fatalf("the held bodies sent, then one more: %q; want each read and answered (400, not JSON)", answers)
	}
}
