package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// fillDisk writes a ballast file into dir until its file system is full
// and returns the ballast's path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	// Single pages too: a tmpfs hands them out one at a time.
	for {
		if _, err := f.Write(buf[:1]); err != nil {
			break
		}
	}
	return path
}

// reported is what the daemon reports of its processes, jobs and fillers,
// minus what changes on its own (times, sampled usage).
func (h *ckptHarness) reported() string {
	h.t.Helper()
	c := h.client()
	ps, err := c.PS(ctxT(h.t), api.PSParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	jobs, err := c.Jobs(ctxT(h.t), api.JobsParams{})
	if err != nil {
		h.t.Fatal(err)
	}
	fillers, err := c.Fillers(ctxT(h.t))
	if err != nil {
		h.t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "proc %s %s pid %d init %d gpus %d err %q\n", p.Name, p.State, p.PID, p.InitPID, len(p.GPUs), p.Error)
	}
	for _, j := range jobs {
		fmt.Fprintf(&b, "job %s %s attempts %d proc %q\n", j.Name, j.State, len(j.Attempts), j.Process)
	}
	for _, f := range fillers {
		fmt.Fprintf(&b, "filler %d pid %d target %d\n", f.Index, f.PID, f.TargetMiB)
	}
	return b.String()
}

// processesNamed lists live processes started with GPUSCHED_NAME=name.
func processesNamed(t *testing.T, name string) []int {
	t.Helper()
	return procsWhere(t, func(pid int) bool {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		return err == nil && strings.Contains("\x00"+string(env), "\x00GPUSCHED_NAME="+name+"\x00")
	})
}

// TestStateDiskFull puts the state directory on a small tmpfs and fills
// it: run, submit, freeze and fill each fail with an error that says no
// space is left, and change nothing: no untracked process, no job that
// could run, the process to freeze still running (the driver agrees), no
// filler helper holding memory. acquire, which persists nothing, still
// works. What is reported afterwards equals what was reported before, and
// still does once space is freed and the daemon restarted; then the same
// calls succeed.
func TestStateDiskFull(t *testing.T) {
	stateDir := testutil.Tmpfs(t, "state-disk-full", "2m")
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.StateDir = stateDir })
	h.begin()
	c := h.client()
	h.jobs("a", 0, 300)
	h.submit(api.JobSpec{Name: "done", Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 10}})
	h.waitJob("done")
	before := h.reported()

	ballast := fillDisk(t, h.cfg.StateDir)
	full := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("%s with the state disk full: %v; want an error saying no space is left", what, err)
		}
	}
	_, err := c.Run(ctxT(t), api.RunParams{Name: "diskfull-unrecorded", Dir: "/", GPU: &api.GPURef{Index: 1},
		Cmd: h.simjob("--vram", "100"), Env: map[string]string{"PATH": os.Getenv("PATH")}})
	full("run", err)
	if pids := processesNamed(t, "diskfull-unrecorded"); len(pids) != 0 {
		t.Errorf("run that could not be recorded left processes %v", pids)
	}
	_, err = c.Submit(ctxT(t), api.SubmitParams{JobSpec: api.JobSpec{Name: "j", Dir: "/", Cmd: h.simjob("--vram", "100"),
		VRAM: api.VRAM{MiB: 100}, Env: map[string]string{"PATH": os.Getenv("PATH")}}})
	full("submit", err)
	_, err = c.Freeze(ctxT(t), api.FreezeParams{Name: "a"})
	full("freeze", err)
	if p := h.proc("a"); p.State != api.StateRunning || !allEqual(h.cudaStates("a"), "running") || h.stopped("a") {
		t.Errorf("a after a freeze that could not be recorded: %s (%q), driver %v", p.State, p.Error, h.cudaStates("a"))
	}
	_, err = c.Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 1}, MiB: api.VRAM{MiB: 1024}})
	full("fill", err)
	h.refresh()
	if u := h.used(1); u != 0 {
		t.Errorf("GPU 1 holds %d MiB after a fill that could not be recorded", u)
	}
	holder := h.client()
	l, err := holder.Acquire(ctxT(t), api.AcquireParams{GPUIDs: []api.GPURef{{Index: 1}}})
	if err != nil {
		t.Errorf("acquire (nothing persisted) with the state disk full: %v", err)
	} else if _, err := holder.Release(ctxT(t), l.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Jobs(ctxT(t), api.JobsParams{}); err != nil {
		t.Fatal(err)
	}
	if got := h.reported(); got != before {
		t.Fatalf("reported with the state disk full:\n%s\nbefore:\n%s", got, before)
	}

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	h.stop()
	h.begin()
	if got := h.reported(); got != before {
		t.Fatalf("reported after a restart:\n%s\nbefore the disk filled:\n%s", got, before)
	}
	if pids := processesNamed(t, "diskfull-unrecorded"); len(pids) != 0 {
		t.Errorf("processes of the failed run after restart: %v", pids)
	}
	c = h.client()
	if _, err := c.Freeze(ctxT(t), api.FreezeParams{Name: "a"}); err != nil {
		t.Fatalf("freeze with space again: %v", err)
	}
	if _, err := c.Fill(ctxT(t), api.FillParams{GPU: &api.GPURef{Index: 1}, MiB: api.VRAM{MiB: 1024}}); err != nil {
		t.Fatalf("fill with space again: %v", err)
	}
	h.submit(api.JobSpec{Name: "j", Cmd: []string{"true"}, VRAM: api.VRAM{MiB: 10}})
	if j := h.waitJob("j"); j.State != api.JobDone {
		t.Fatalf("job j with space again: %+v", j)
	}
}

// TestExitRecordedOnceTheStateDiskHasRoom: a process that exits while the
// state directory is full is recorded exited once the directory has room
// again. Before, its record stayed running for good (a red-team pass,
// 2026-11-29): `wait` never returned, `kill` answered that the daemon was
// not watching it, its name and its owner's process slot stayed taken,
// until a restart.
func TestExitRecordedOnceTheStateDiskHasRoom(t *testing.T) {
	stateDir := testutil.Tmpfs(t, "state-exit-full", "2m")
	h := prepareCkpt(t, config.DriverSim, func(c *config.Config) { c.StateDir = stateDir })
	refused := make(chan struct{}, 1)
	core := zapcore.RegisterHooks(zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Core(), func(e zapcore.Entry) error {
		if strings.HasPrefix(e.Message, "record exit") {
			select {
			case refused <- struct{}{}:
			default:
			}
		}
		return nil
	})
	h.opts = append(h.opts, WithLogger(zap.New(core)))
	h.begin()
	c := h.client()
	gate := filepath.Join(t.TempDir(), "go")
	if _, err := c.Run(ctxT(t), api.RunParams{Name: "short", Dir: "/", Cmd: []string{"sh", "-c", "while [ ! -e " + gate + " ]; do sleep 0.05; done"}}); err != nil {
		t.Fatal(err)
	}
	ballast := fillDisk(t, stateDir)
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-refused:
	case <-ctxT(t).Done():
		t.Fatal("the exit was recorded on a full state directory, or never seen")
	}
	if p := h.proc("short"); p.State != api.StateRunning {
		t.Fatalf("with the exit unrecorded the record says %s", p.State)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	p, err := c.Wait(ctxT(t), api.WaitParams{Name: "short"}, nil)
	if err != nil || p.State != api.StateExited || p.Exit == nil || p.Exit.Code == nil || *p.Exit.Code != 0 {
		t.Fatalf("wait once the state directory has room: %+v, %v", p, err)
	}
}
