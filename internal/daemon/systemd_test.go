package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestSystemdRestartUnderTheShippedUnit runs the daemon binary the way
// gpuschedd.service and gpuschedd.socket do: the socket passed as fd 3
// (LISTEN_FDS, LISTEN_PID), NOTIFY_SOCKET with a watchdog, and on restart
// SIGTERM to the main process only (KillMode=process). sd_notify says
// READY, STATUS, WATCHDOG and STOPPING in order; the managed process keeps
// running through the restart and is re-adopted; a request sent while no
// daemon runs waits in systemd's socket and the next daemon answers it.
func TestSystemdRestartUnderTheShippedUnit(t *testing.T) {
	units := filepath.Join("..", "..", "deploy", "systemd")
	service := testutil.UnitSettings(t, filepath.Join(units, "gpuschedd.service"))
	socket := testutil.UnitSettings(t, filepath.Join(units, "gpuschedd.socket"))
	for key, want := range map[string]string{"Service.Type": "notify", "Service.KillMode": "process", "Service.Restart": "on-failure"} {
		if got := service[key]; len(got) != 1 || got[0] != want {
			t.Fatalf("gpuschedd.service %s = %q, want %q", key, got, want)
		}
	}
	if len(service["Service.WatchdogSec"]) != 1 {
		t.Fatal("gpuschedd.service sets no WatchdogSec")
	}
	if got := socket["Socket.ListenStream"]; len(got) != 1 || got[0] != api.DefaultSocket {
		t.Fatalf("gpuschedd.socket ListenStream = %q, want %s", got, api.DefaultSocket)
	}

	h := prepareHarness(t)
	// systemd's part: it binds the socket and keeps it across restarts.
	if err := os.MkdirAll(filepath.Dir(h.cfg.Socket), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: h.cfg.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(h.cfg.Socket, 0o660); err != nil {
		t.Fatal(err)
	}
	passed, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	start := func() (*daemonProc, *testutil.Notify) {
		n := testutil.NewNotify(t, h.dir)
		// LISTEN_PID must be the daemon's own pid, known only once it runs: exec keeps the shell's.
		cmd := exec.Command("/bin/sh", append([]string{"-c", `export LISTEN_PID=$$; exec "$0" "$@"`, h.bins.Daemon}, h.binaryArgs()...)...)
		cmd.ExtraFiles = []*os.File{passed}
		return h.spawnBinary(cmd, "NOTIFY_SOCKET="+n.Path, "LISTEN_FDS=1", "LISTEN_FDNAMES=gpuschedd.socket", "WATCHDOG_USEC=200000"), n
	}

	first, n := start()
	seen := n.WaitFor(t, "READY=1", 30*time.Second)
	p := h.run("survivor", "sleep", "1000")
	t.Cleanup(func() { unix.Kill(p.InitPID, unix.SIGKILL) })
	seen = append(seen, n.WaitFor(t, "STATUS=1 process (1 running); jobs: 0 queued, 0 running; 0 leases, 0 fillers", 30*time.Second)...)
	seen = append(seen, n.WaitFor(t, "WATCHDOG=1", 30*time.Second)...)

	if err := first.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	seen = append(seen, n.WaitFor(t, "STOPPING=1", 30*time.Second)...)
	if err := first.cmd.Wait(); err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, first.stderr)
	}
	assertOrder(t, seen, "READY=1", "STATUS=1 process (1 running)", "WATCHDOG=1", "STOPPING=1")
	if err := unix.Kill(p.PID, 0); err != nil {
		t.Fatalf("the managed process died with the daemon: %v", err)
	}
	if _, err := os.Lstat(h.cfg.Socket); err != nil {
		t.Fatalf("the daemon removed systemd's socket: %v", err)
	}

	// No daemon runs: the connection and its request wait in the socket's backlog.
	conn, err := net.Dial("unix", h.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(`{"id":1,"method":"status","params":{"name":"survivor"}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	second, n2 := start()
	n2.WaitFor(t, "READY=1", 30*time.Second)
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		t.Fatalf("the request sent during the restart got no answer: %v", err)
	}
	var resp struct {
		OK     bool        `json:"ok"`
		Result api.Process `json:"result"`
	}
	if err := json.Unmarshal(line, &resp); err != nil || !resp.OK || resp.Result.State != api.StateRunning || resp.Result.PID != p.PID {
		t.Fatalf("after the restart: %s (%v)", line, err)
	}
	if _, err := h.client().Kill(ctxT(t), api.KillParams{Name: "survivor"}); err != nil {
		t.Fatal(err)
	}
	second.cmd.Process.Signal(unix.SIGTERM)
	if err := second.cmd.Wait(); err != nil {
		t.Fatalf("second daemon exit: %v\n%s", err, second.stderr)
	}
}

// assertOrder checks that lines starting with each prefix appear in seen in that order.
func assertOrder(t *testing.T, seen []string, prefixes ...string) {
	t.Helper()
	i := 0
	for _, l := range seen {
		if i < len(prefixes) && strings.HasPrefix(l, prefixes[i]) {
			i++
		}
	}
	if i < len(prefixes) {
		t.Fatalf("sd_notify lines %q: missing %q in order %q", seen, prefixes[i], prefixes)
	}
}

// TestActivatedSocketMustBeTheDaemonsOwn: a passed socket at another path,
// or of another kind, is refused with a sentence that says what to fix.
func TestActivatedSocketMustBeTheDaemonsOwn(t *testing.T) {
	dir := testutil.ShortDir(t)
	other, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "other.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for name, tc := range map[string]struct {
		ln   interface{ File() (*os.File, error) }
		want string
	}{
		"another path": {other, "make --socket and ListenStream= the same"},
		"tcp":          {tcp.(*net.TCPListener), "serves a Unix stream socket"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := tc.ln.File()
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			// activation.Files reads fd 3 onwards of this very process: put the socket there.
			saved, err := unix.Dup(3)
			if err == nil {
				defer func() { unix.Dup2(saved, 3); unix.Close(saved) }()
			}
			if err := unix.Dup2(int(f.Fd()), 3); err != nil {
				t.Fatal(err)
			}
			t.Setenv("LISTEN_PID", itoa(os.Getpid()))
			t.Setenv("LISTEN_FDS", "1")
			_, err = openListener(filepath.Join(dir, "gs.sock"), "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("openListener: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// TestWatchdogStopsPingingAWedgedDaemon: WATCHDOG=1 follows each round in
// which the daemon answered, and no round in which it did not.
func TestWatchdogStopsPingingAWedgedDaemon(t *testing.T) {
	answers := make(chan error)
	sent := make(chan string, 16)
	w := watchdog{every: time.Millisecond, ping: true, log: zaptest.NewLogger(t),
		alive:  func(context.Context) error { return <-answers },
		status: func() string { return "steady" },
		notify: func(s string) { sent <- s }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.run(ctx); close(done) }()

	answers <- nil
	if got := <-sent; got != "STATUS=steady" {
		t.Fatalf("first: %q", got)
	}
	if got := <-sent; got != "WATCHDOG=1" {
		t.Fatalf("after a healthy round: %q", got)
	}
	answers <- errors.New("wedged")
	answers <- errors.New("still wedged")
	answers <- nil // the round after this one blocks the loop in alive again
	if got := <-sent; got != "WATCHDOG=1" {
		t.Fatalf("after recovering: %q", got)
	}
	select {
	case extra := <-sent:
		t.Fatalf("a wedged round sent %q", extra)
	default:
	}
	cancel()
	select {
	case answers <- nil: // a round in progress when ctx ended
	case <-done:
	}
	<-done
}
