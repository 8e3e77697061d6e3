package daemon

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// daemonProc is gpuschedd running as its own process.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
}

// startBinary runs the built gpuschedd on the harness's configuration and
// waits for READY=1 on NOTIFY_SOCKET, as systemd would; flags come after
// the configuration's.
func (h *harness) startBinary(flags ...string) *daemonProc {
	h.t.Helper()
	n := testutil.NewNotify(h.t, h.dir)
	dp := h.spawnBinary(exec.Command(h.bins.Daemon, append(h.binaryArgs(), flags...)...), "NOTIFY_SOCKET="+n.Path)
	n.WaitFor(h.t, "READY=1", 30*time.Second)
	return dp
}

// startBinaryVia is startBinary through sh -c script, which ends in
// exec "$@", with arg0 as its $0.
func (h *harness) startBinaryVia(script, arg0 string, flags ...string) *daemonProc {
	h.t.Helper()
	n := testutil.NewNotify(h.t, h.dir)
	args := append([]string{"-c", script, arg0, h.bins.Daemon}, append(h.binaryArgs(), flags...)...)
	dp := h.spawnBinary(exec.Command("sh", args...), "NOTIFY_SOCKET="+n.Path)
	n.WaitFor(h.t, "READY=1", 30*time.Second)
	return dp
}

// binaryArgs are the flags that run the built gpuschedd on the harness's
// configuration.
func (h *harness) binaryArgs() []string {
	c := h.cfg
	args := []string{"--socket", c.Socket, "--state-dir", c.StateDir, "--log-dir", c.LogDir,
		"--sim", c.Sim, "--sim-dir", c.SimDir, "--gpu-poll", "50ms", "--log-format", "console",
		"--checkpoint-driver", c.CheckpointDriver, "--thaw-margin", fmt.Sprint(c.ThawMarginMiB),
		"--sim-checkpoint-per-gib", c.SimCheckpointGiB.String(), "--sim-restore-per-gib", c.SimRestoreGiB.String()}
	if c.CudaCheckpoint != "" {
		args = append(args, "--cuda-checkpoint", c.CudaCheckpoint)
	}
	if c.CRIU != "" {
		args = append(args, "--criu", c.CRIU)
	}
	if c.Group != "" {
		args = append(args, "--group", c.Group)
	}
	if c.DaemonCPUs != "" {
		args = append(args, "--daemon-cpus", c.DaemonCPUs)
	}
	return args
}

// spawnBinary starts cmd with env added to the test's environment,
// capturing its stderr; the test's cleanup kills it if it still runs.
func (h *harness) spawnBinary(cmd *exec.Cmd, env ...string) *daemonProc {
	h.t.Helper()
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	dp := &daemonProc{cmd: cmd, stderr: &stderr}
	h.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		killLeftOver(h.t, h.dir)
	})
	return dp
}

// waitPidExit blocks until pid exits, through a pidfd (no polling).
func waitPidExit(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // already gone
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 30_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("pid %d did not exit: %v", pid, err)
		}
		return
	}
}

// TestReadoptAfterKill9 kills -9 the daemon while it manages processes,
// changes the world behind its back, restarts it and checks that every
// process is accounted for, live ones still controllable.
func TestReadoptAfterKill9(t *testing.T) {
	h := prepareHarness(t)
	first := h.startBinary()
	fifo := filepath.Join(h.dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	long := h.run("long", "sh", "-c", `echo before; trap 'echo bye; exit 0' TERM; while :; do sleep 0.05; done`)
	short := h.run("short", "sh", "-c", `read x < `+fifo+`; exit 5`)
	doomed := h.run("doomed", "sleep", "1000")
	h.followUntil("long", "before")

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.cmd.Wait()

	// While no daemon runs: one process ends by itself, one is killed.
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitPidExit(t, short.InitPID)
	unix.Kill(doomed.InitPID, unix.SIGKILL)
	waitPidExit(t, doomed.InitPID)

	h.startBinary()
	c := h.client()
	got := map[string]api.Process{}
	ps, err := c.PS(ctxT(t), api.PSParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		got[p.Name] = p
	}
	if len(got) != 3 {
		t.Fatalf("after restart: %+v", ps)
	}
	if p := got["long"]; p.State != api.StateRunning || p.PID != long.PID || p.InitPID != long.InitPID {
		t.Fatalf("long after restart: %+v", p)
	}
	if p := got["short"]; p.State != api.StateExited || p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 5 {
		t.Fatalf("short after restart: %+v (exit %+v), want exited with code 5", p, p.Exit)
	}
	if p := got["doomed"]; p.State != api.StateExited || p.Exit == nil || !p.Exit.Unknown {
		t.Fatalf("doomed after restart: %+v (exit %+v), want exited, code unknown", p, p.Exit)
	}

	// The re-adopted process is still controllable and its end is observed.
	k, err := c.Kill(ctxT(t), api.KillParams{Name: "long"})
	if err != nil {
		t.Fatal(err)
	}
	if k.State != api.StateExited || k.Exit == nil || k.Exit.Code == nil || *k.Exit.Code != 0 {
		t.Fatalf("long killed after restart: %+v exit %+v, want exit 0 from its TERM trap", k, k.Exit)
	}
	lines, _ := c.Logs(ctxT(t), "long", -1)
	// (sh may report its sleep "Terminated" in between: TERM reached the whole tree.)
	if len(lines) < 2 || lines[0] != "before" || lines[len(lines)-1] != "bye" {
		t.Fatalf("log of long across the restart: %q", lines)
	}
	// And new work runs.
	h.run("fresh", "true")
	if p := h.waitExit("fresh"); p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
		t.Fatalf("fresh: %+v", p.Exit)
	}
}

// TestCleanRestartKeepsProcesses stops the daemon with its context (as
// SIGTERM does): processes keep running and the next daemon adopts them.
func TestCleanRestartKeepsProcesses(t *testing.T) {
	h := newHarness(t)
	p := h.run("survivor", "sh", "-c", `echo up; while :; do sleep 0.05; done`)
	h.followUntil("survivor", "up")
	h.stop()
	if err := unix.Kill(p.PID, 0); err != nil {
		t.Fatalf("process died with the daemon: %v", err)
	}
	h.start()
	got, err := h.client().Process(ctxT(t), "survivor")
	if err != nil || got.State != api.StateRunning || got.PID != p.PID {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	k, err := h.client().Kill(ctxT(t), api.KillParams{Name: "survivor"})
	if err != nil || k.Exit == nil || k.Exit.Signal != "SIGTERM" {
		t.Fatalf("kill after restart: %+v %v", k, err)
	}
}

// TestAdoptedStartingTreeRecordedOnceItsCommandRuns is a daemon killed
// between its "go" and the supervisor's "started": the next daemon adopts
// the tree as starting and records it running once the command appears.
// The supervisor here is a shell held at a FIFO before it forks.
func TestAdoptedStartingTreeRecordedOnceItsCommandRuns(t *testing.T) {
	h := newHarness(t)
	p := h.run("slow", "sleep", "1000")
	h.stop()
	unix.Kill(p.InitPID, unix.SIGKILL)
	var ws unix.WaitStatus
	unix.Wait4(p.InitPID, &ws, 0, nil)
	gate := filepath.Join(h.dir, "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	sup := exec.Command("sh", "-c", `read x < "$0"; sleep 1000 & wait`, gate)
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sup.Process.Kill() })
	start, err := procfs.StartTime(sup.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !editRecord(t, h, "slow", func(m map[string]any) bool {
		m["state"], m["init_pid"], m["init_start"], m["pid"], m["pid_start"] = "starting", sup.Process.Pid, start, 0, 0
		return true
	}) {
		t.Fatal("no record of slow")
	}
	h.start()
	ctx := ctxT(t)
	running := make(chan error, 1)
	subscribed := make(chan struct{})
	go func() {
		running <- h.client().Events(ctx, api.EventsParams{Name: "slow"}, func(e *api.Event) error {
			if e.Type == api.EventSubscribed {
				close(subscribed)
			}
			if e.State == api.StateRunning {
				return errFound
			}
			return nil
		})
	}()
	<-subscribed
	if got, err := h.client().Process(ctx, "slow"); err != nil || got.State != api.StateStarting {
		t.Fatalf("adopted before its command runs: %+v, %v", got, err)
	}
	if err := os.WriteFile(gate, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := <-running; !errors.Is(err, errFound) {
		t.Fatalf("no running event: %v", err)
	}
	got, err := h.client().Process(ctx, "slow")
	if err != nil || got.PID <= 0 || got.PID == sup.Process.Pid {
		t.Fatalf("after the command started: %+v, %v", got, err)
	}
}

var errFound = errors.New("found")
