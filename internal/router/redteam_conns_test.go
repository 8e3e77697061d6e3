package router_test

import (
	"bufio"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
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
	g.startRouter("max_conns = 16\nmax_conns_per_user = 4\nidle_timeout = \"2s\"\n" + g.simModel("alpha", 1024))
	port := strings.TrimPrefix(g.url, "http://127.0.0.1:")
	cmd := exec.Command("/usr/bin/python3", "-c", connFlood, port)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: flooder.UID, Gid: flooder.GID, Groups: flooder.Groups()}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	answers := map[string]int{}
	for lines.Scan() && lines.Text() != "holding" {
		answers[lines.Text()]++
	}
	if answers["HTTP/1.1 200 OK"] != 4 || answers["HTTP/1.1 503 Service Unavailable"] != 12 {
		t.Fatalf("one user's 16 connections were answered %v; want 4 served and 12 refused (503)", answers)
	}
	// Another local user (not root, whose reserve would let it in anyway).
	other := exec.Command("/usr/bin/python3", "-c", `import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=10).status)`, g.url)
	other.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: g.user.UID, Gid: g.user.GID, Groups: g.user.Groups()}}
	if got, err := other.CombinedOutput(); err != nil || strings.TrimSpace(string(got)) != "200" {
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
