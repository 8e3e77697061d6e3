package testutil

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// StopGrace is how long a daemon StartSimDaemon started has to exit after
// SIGTERM before the test fails.
const StopGrace = 15 * time.Second

// SimDaemon is a gpuschedd a test started on simulated GPUs.
type SimDaemon struct {
	Socket string
	Cmd    *exec.Cmd

	stopOnce sync.Once
	stopErr  error
}

// StartSimDaemon runs bins.Daemon as root on the simulated GPUs sim
// ("1x24G"), with its socket, state, logs and simulated GPUs in dir, the
// socket usable by group, the extra flags after the usual test ones and
// its stderr to stderr, and returns once it has told NOTIFY_SOCKET
// READY=1. When t ends it kills (SIGKILL) the managed processes still
// alive, which would outlive the daemon, then sends the daemon SIGTERM and
// fails t if it has not exited within StopGrace (it is then killed).
func StartSimDaemon(t testing.TB, bins Binaries, dir, sim, group string, stderr io.Writer, extra ...string) *SimDaemon {
	t.Helper()
	d := &SimDaemon{Socket: filepath.Join(dir, "s.sock")}
	notify := NewNotify(t, dir)
	args := []string{"--sim", sim, "--socket", d.Socket, "--group", group,
		"--state-dir", filepath.Join(dir, "state"), "--log-dir", filepath.Join(dir, "logs"),
		"--sim-dir", filepath.Join(dir, "sim"), "--cgroup-root", "none",
		"--gpu-poll", "50ms", "--kill-grace", "2s", "--log-format", "console", "--log-level", "warn"}
	d.Cmd = exec.Command(bins.Daemon, append(args, extra...)...)
	d.Cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+notify.Path)
	d.Cmd.Stderr = stderr
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.killProcesses(t)
		if err := d.Stop(StopGrace); err != nil {
			t.Error(err)
		}
	})
	notify.WaitFor(t, "READY=1", 30*time.Second)
	return d
}

// killProcesses kills every managed process still alive, each named as
// UID/NAME: names are per user, and a bare name two users share is
// refused as ambiguous, which left both processes running. A kill
// refused otherwise fails the test.
func (d *SimDaemon) killProcesses(t testing.TB) {
	ctx := context.Background()
	c, err := api.Dial(ctx, d.Socket)
	if err != nil {
		return
	}
	defer c.Close()
	ps, err := c.PS(ctx, api.PSParams{})
	if err != nil {
		return
	}
	for _, p := range ps {
		if p.State == api.StateExited {
			continue
		}
		ref := fmt.Sprintf("%d/%s", p.UID, p.Name)
		if _, err := c.Kill(ctx, api.KillParams{Name: ref, Signal: "SIGKILL"}); err != nil && !api.IsConflict(err) && !api.IsNotFound(err) {
			t.Errorf("cleanup: kill %s: %v", ref, err)
		}
	}
}

// Stop sends the daemon SIGTERM and waits for it to exit; after grace it
// ends it with SIGQUIT (Go prints every goroutine's stack to its stderr),
// or SIGKILL, and says so. Later calls return what the first did.
func (d *SimDaemon) Stop(grace time.Duration) error {
	d.stopOnce.Do(func() { d.stopErr = d.stop(grace) })
	return d.stopErr
}

func (d *SimDaemon) stop(grace time.Duration) error {
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.Cmd.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	// Its goroutines, into its stderr, say what it waits for.
	_ = d.Cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = d.Cmd.Process.Kill()
		<-done
	}
	return fmt.Errorf("gpuschedd still running %v after SIGTERM: its goroutines are in its stderr", grace)
}
