package daemon

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
)

// holdConn, run as a local user, connects to 127.0.0.1:PORT, says "held"
// and waits for a line on stdin; then it asks the server for /health on
// that connection and says whether it was answered or closed.
const holdConn = `
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("held", flush=True)
sys.stdin.readline()
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    print("answered" if s.recv(100) else "closed", flush=True)
except OSError:
    print("closed", flush=True)
`

// TestRedTeamHeldConnectionHoldsNoTreeInRAM: any local user may connect
// to a port a managed process listens on (a model server on loopback),
// and CRIU refuses to dump a tree with an established TCP connection
// ("Connected TCP socket, consider using --tcp-established"): one idle
// connection of another user's kept the owner's process from hibernating,
// and so in host RAM, for as long as they liked. Now dumps close such
// connections (CRIU's tcp_close: restored closed, as after a network
// outage); the listening socket comes back and serves.
func TestRedTeamHeldConnectionHoldsNoTreeInRAM(t *testing.T) {
	owner := testutil.NewUser(t, "gstcpown", "gstcp")
	other := testutil.NewUser(t, "gstcpoth", "gstcp")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gstcp" })
	port := testutil.FreePort(t)
	if _, errOut, code := h.ctlAs(owner, "run", "--dir", "/", "srv", "--gpu", "0", "--", h.bins.SimJob, "--http", strconv.Itoa(port), "--vram", "64"); code != 0 {
		t.Fatalf("run srv: %s", errOut)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/health", port)
	awaitHealthy(t, url)

	stdin, lines := testutil.PythonAs(t, other, holdConn, strconv.Itoa(port))
	if !lines.Scan() || lines.Text() != "held" {
		t.Fatalf("the other user's connection: %q", lines.Text())
	}

	if _, errOut, code := h.ctlAs(owner, "hibernate", "srv"); code != 0 {
		t.Fatalf("the owner's hibernate while another user holds a connection to it: %s", errOut)
	}
	if _, errOut, code := h.ctlAs(owner, "thaw", "srv"); code != 0 {
		t.Fatalf("thaw: %s", errOut)
	}
	awaitHealthy(t, url)
	fmt.Fprintln(stdin)
	if !lines.Scan() || lines.Text() != "closed" {
		t.Fatalf("the held connection after the hibernate and thaw: %q; want it closed", lines.Text())
	}
}

// awaitHealthy polls url until it answers 200.
func awaitHealthy(t *testing.T, url string) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering 200 after 30s", url)
		}
	}
}

// connClient, run in a tree, connects to 127.0.0.1:PORT and prints each
// line it receives, then "closed" once the connection is gone.
const connClient = `
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
print("connected", flush=True)
try:
    f = s.makefile("r")
    for line in f:
        print("got", line.strip(), flush=True)
except OSError:
    pass
print("closed", flush=True)
time.sleep(3600)
`

// TestForkClosesTheCopysConnectionsOnly: a fork of a tree holding an
// established TCP connection (refused before tcp_close) leaves the
// original's connection working and gives the copy a closed one.
func TestForkClosesTheCopysConnectionsOnly(t *testing.T) {
	owner := testutil.NewUser(t, "gstcpfork", "gstcp")
	h := newDiskHarness(t, config.DriverSim, func(c *config.Config) { c.Group = "gstcp" })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if _, errOut, code := h.ctlAs(owner, "run", "--dir", "/", "client", "--gpu", "0", "--", "/usr/bin/python3", "-c", connClient, strconv.Itoa(port)); code != 0 {
		t.Fatalf("run client: %s", errOut)
	}
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	h.followCount("client", "connected", 1)
	if _, errOut, code := h.ctlAs(owner, "fork", "client", "--copies", "1"); code != 0 {
		t.Fatalf("fork of a tree holding a TCP connection: %s", errOut)
	}
	h.followCount("client-1", "closed", 1)
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	h.followCount("client", "got ping", 1)
}
