package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// runOnce runs a second Daemon on cfg and returns Run's error (it must fail
// fast; a daemon that starts is stopped and reported).
func runOnce(t *testing.T, cfg config.Config) error {
	t.Helper()
	d, err := New(cfg, WithLogger(zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel))))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-d.Ready():
		cancel()
		<-done
		return errors.New("second daemon started")
	}
}

func TestRefusesALiveDaemonsSocketAndState(t *testing.T) {
	h := newHarness(t)
	other := h.cfg
	other.StateDir = filepath.Join(h.dir, "state2")
	if err := runOnce(t, other); !errors.Is(err, ErrDaemonRunning) {
		t.Fatalf("second daemon on a live socket: %v", err)
	}
	other = h.cfg
	other.Socket = filepath.Join(h.dir, "other.sock")
	if err := runOnce(t, other); err == nil || !strings.Contains(err.Error(), "in use by another gpuschedd") {
		t.Fatalf("second daemon on a used state dir: %v", err)
	}
	// The first one is unharmed.
	if _, err := h.client().Status(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestRemovesOnlyAStaleSocket(t *testing.T) {
	h := prepareHarness(t)
	os.MkdirAll(filepath.Dir(h.cfg.Socket), 0o755)
	// A socket file nobody listens on any more.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: h.cfg.Socket, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	h.start()
	if _, err := h.client().Status(ctxT(t)); err != nil {
		t.Fatalf("daemon over a stale socket: %v", err)
	}
	h.stop()

	// A regular file at the socket path is never replaced.
	os.WriteFile(h.cfg.Socket, []byte("precious"), 0o600)
	if err := runOnce(t, h.cfg); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("daemon over a regular file: %v", err)
	}
	if b, _ := os.ReadFile(h.cfg.Socket); string(b) != "precious" {
		t.Fatal("regular file at the socket path was touched")
	}
}

func TestSocketModeAndGroup(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.Group = "nogroup" })
	fi, err := os.Stat(h.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o660 || st.Uid != 0 || st.Gid != 65534 {
		t.Fatalf("socket mode %v uid %d gid %d, want 0660 root:nogroup", fi.Mode().Perm(), st.Uid, st.Gid)
	}
}

// TestBinaryShutdownAndSocat drives the real binary: socat speaks to it,
// SIGTERM stops it cleanly (STOPPING=1, exit 0, socket removed) while its
// process keeps running, and the next daemon adopts that process.
func TestBinaryShutdownAndSocat(t *testing.T) {
	h := prepareHarness(t)
	n := testutil.NewNotify(t, h.dir)
	c := h.cfg
	start := func() *exec.Cmd {
		cmd := exec.Command(h.bins.Daemon, "--socket", c.Socket, "--state-dir", c.StateDir, "--log-dir", c.LogDir, "--sim", "1x8G", "--sim-dir", c.SimDir)
		cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+n.Path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		n.WaitFor(t, "READY=1", 30*time.Second)
		return cmd
	}
	first := start()
	if socat, err := exec.LookPath("socat"); err == nil {
		out, err := exec.Command("sh", "-c", `echo '{"method":"status"}' | `+socat+` - UNIX-CONNECT:`+c.Socket).Output()
		if err != nil || !strings.Contains(string(out), `"ok":true`) || !strings.Contains(string(out), `"total_mib":8192`) {
			t.Fatalf("socat: %q %v", out, err)
		}
	} else {
		t.Log("socat not installed (make test-deps installs it); skipped the socat check")
	}
	p := h.run("keeper", "sleep", "1000")
	first.Process.Signal(syscall.SIGTERM)
	n.WaitFor(t, "STOPPING=1", 30*time.Second)
	if err := first.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v", err)
	}
	if _, err := os.Stat(c.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after a clean stop: %v", err)
	}
	if err := syscall.Kill(p.PID, 0); err != nil {
		t.Fatalf("managed process died with the daemon: %v", err)
	}
	start()
	if got, err := h.client().Process(ctxT(t), "keeper"); err != nil || got.State != api.StateRunning || got.PID != p.PID {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	h.client().Kill(ctxT(t), api.KillParams{Name: "keeper", Signal: "KILL"})
}

func TestNoDriverMessageNamesSim(t *testing.T) {
	bins := testutil.Build(t)
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	dir := testutil.ShortDir(t)
	cmd := exec.Command(bins.Daemon, "--socket", filepath.Join(dir, "s.sock"), "--state-dir", filepath.Join(dir, "st"), "--log-dir", filepath.Join(dir, "logs"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "--sim") {
		t.Fatalf("exit %v, stderr %q: want exit 1 and a message naming --sim", err, stderr.String())
	}
}

// TestLogCapRotatesInSupervisor: the supervisor holds a chatty process's
// log to the cap by copy-truncate (the output, 90 KB, is more than one
// 64 KiB read of the pipe, so it rotates more than once), and what is
// retained reads as one unbroken tail of the output.
func TestLogCapRotatesInSupervisor(t *testing.T) {
	h := newHarness(t, func(c *config.Config) { c.LogMaxBytes = 4096; c.LogKeep = 1 })
	h.run("chatty", "sh", "-c", `i=0; while [ $i -lt 3000 ]; do echo "line $i of some filler text"; i=$((i+1)); done; echo wrote`)
	h.waitExit("chatty") // the supervisor copies all output before it reports the exit
	for _, name := range []string{"chatty.log", "chatty.log.1"} {
		fi, err := os.Stat(filepath.Join(h.cfg.LogDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > 4096+64<<10 {
			t.Fatalf("%s: size %d past the cap", name, fi.Size())
		}
	}
	lines, _ := h.client().Logs(ctxT(t), "chatty", -1)
	if len(lines) < 2 || len(lines) >= 3001 || lines[len(lines)-1] != "wrote" {
		t.Fatalf("%d lines retained: want a tail ending in \"wrote\"", len(lines))
	}
	first := len(lines) - 1 // lines[0] may be the cut end of a line
	for i := 1; i < len(lines)-1; i++ {
		if want := fmt.Sprintf("line %d of some filler text", 3000-first+i); lines[i] != want {
			t.Fatalf("line %d = %q, want %q", i, lines[i], want)
		}
	}
}
