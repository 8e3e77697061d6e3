package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.Cleanup()
	os.Exit(code)
}

// harness runs a Daemon in-process on simulated GPUs, with the built
// gpuschedd binary as the process init.
type harness struct {
	t      testing.TB
	bins   testutil.Binaries
	dir    string
	cfg    config.Config
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
	opts   []Option // passed to New after the test logger
}

func newHarness(t testing.TB, mods ...func(*config.Config)) *harness {
	t.Helper()
	h := prepareHarness(t, mods...)
	h.start()
	return h
}

// prepareHarness sets up directories and configuration without starting a
// daemon.
func prepareHarness(t testing.TB, mods ...func(*config.Config)) *harness {
	t.Helper()
	testutil.RequiresRoot(t)
	h := &harness{t: t, bins: testutil.Build(t), dir: testutil.ShortDir(t)}
	c := config.Default()
	c.Socket = filepath.Join(h.dir, "run", "gs.sock")
	c.StateDir = filepath.Join(h.dir, "state")
	c.LogDir = filepath.Join(h.dir, "logs")
	c.Sim = "2"
	c.SimDir = filepath.Join(h.dir, "run", "sim")
	c.InitPath = h.bins.Daemon
	c.KillGrace = 5 * time.Second
	c.GPUPoll = 50 * time.Millisecond
	c.CgroupRoot = config.CgroupNone // never reorganise the test runner's own cgroup
	c.CPUSlice = 0                   // nor reslice its threads (the built daemon's: TestDaemonThreadsAtTheSliceTreesAtTheDefault)
	c.RealtimePriority = 0           // nor put them at real time (TestDaemonThreadsAtRealTimeTreesInTheFairClass)
	for _, m := range mods {
		m(&c)
	}
	h.cfg = c
	t.Cleanup(h.killAll)
	return h
}

// start runs a fresh Daemon on the harness's configuration.
func (h *harness) start() {
	h.t.Helper()
	d, err := New(h.cfg, append([]Option{WithLogger(zaptest.NewLogger(h.t, zaptest.Level(zap.WarnLevel)))}, h.opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	select {
	case <-d.Ready():
	case err := <-done:
		cancel()
		h.t.Fatalf("daemon did not start: %v", err)
	}
	h.d, h.cancel, h.done = d, cancel, done
}

// stop shuts the daemon down cleanly (processes keep running).
func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.done; err != nil {
		h.t.Errorf("daemon Run: %v", err)
	}
	h.cancel = nil
}

// killAll stops the daemon and kills every tree it left running.
func (h *harness) killAll() {
	h.stop()
	if h.d == nil || h.d.table == nil {
		return
	}
	for _, r := range h.d.table.View().Records {
		if r.InitPID > 0 && procfs.Alive(r.InitPID, r.InitStart) {
			unix.Kill(r.InitPID, unix.SIGKILL)
			var ws unix.WaitStatus
			unix.Wait4(r.InitPID, &ws, 0, nil)
		}
	}
	// Filler helpers outlive the daemon by design; not the test.
	for _, f := range h.d.fillers.all() {
		if f.rec.PID > 0 && procfs.Alive(f.rec.PID, f.rec.Start) {
			unix.Kill(f.rec.PID, unix.SIGKILL)
		}
	}
}

func (h *harness) client() *api.Client {
	h.t.Helper()
	c, err := api.Dial(context.Background(), h.cfg.Socket)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run starts cmd under name in / and fails t on error.
func (h *harness) run(name string, cmd ...string) *api.Process {
	h.t.Helper()
	p, err := h.client().Run(ctxT(h.t), api.RunParams{Name: name, Cmd: cmd, Dir: "/", Env: map[string]string{"PATH": os.Getenv("PATH")}})
	if err != nil {
		h.t.Fatalf("run %s: %v", name, err)
	}
	return p
}

// waitExit waits for name to exit and returns its final state.
func (h *harness) waitExit(name string) *api.Process {
	h.t.Helper()
	p, err := h.client().Wait(ctxT(h.t), api.WaitParams{Name: name}, nil)
	if err != nil {
		h.t.Fatalf("wait %s: %v", name, err)
	}
	return p
}

// rawConn speaks raw lines to the daemon, for malformed input.
type rawConn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func (h *harness) raw() *rawConn {
	h.t.Helper()
	c, err := net.Dial("unix", h.cfg.Socket)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return &rawConn{t: h.t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
}

func (rc *rawConn) send(line string) {
	rc.t.Helper()
	if _, err := rc.c.Write([]byte(line + "\n")); err != nil {
		rc.t.Fatal(err)
	}
}

// silentFor reports whether nothing came on rc for d, as while a call
// sent on it waits: nil, or what came instead.
func (rc *rawConn) silentFor(d time.Duration) error {
	rc.c.SetReadDeadline(time.Now().Add(d))
	defer rc.c.SetReadDeadline(time.Time{})
	b, err := rc.r.ReadByte()
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil
	case err != nil:
		return err
	}
	rc.r.UnreadByte()
	return fmt.Errorf("answered (%q...)", b)
}

// recv reads one line as a generic JSON object.
func (rc *rawConn) recv() map[string]any {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	line, err := rc.r.ReadBytes('\n')
	if err != nil {
		rc.t.Fatalf("read: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		rc.t.Fatalf("response %q: %v", line, err)
	}
	return m
}

// record is the one record named name, whoever owns it; it fails the test
// where several users have one.
func (h *harness) record(name string) (proctable.Record, bool) {
	h.t.Helper()
	named := h.d.table.View().Named(name)
	switch len(named) {
	case 0:
		return proctable.Record{}, false
	case 1:
		return *named[0], true
	}
	h.t.Fatalf("%d records named %q", len(named), name)
	return proctable.Record{}, false
}
