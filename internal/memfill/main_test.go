package memfill

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestMain runs the test binary as the filler helper when it is started
// under HelperArgv0, as gpuschedd is.
func TestMain(m *testing.M) {
	if IsHelper() {
		os.Exit(HelperMain())
	}
	os.Exit(m.Run())
}

// simGPUMiB is the simulated GPU of the process tests.
const simGPUMiB = 24576

// rig is a simulated GPU and the options of a filler helper on it, the
// test binary standing in for gpuschedd.
type rig struct {
	reg   *simgpu.Registry
	uuid  string
	opts  Options
	watch *watcher
}

// newRig makes a rig in a temporary directory under parent ("" is TMPDIR).
func newRig(t testing.TB, parent string) *rig {
	t.Helper()
	dir, err := os.MkdirTemp(parent, "memfill")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		killHelpersOf(dir)
		os.RemoveAll(dir)
	})
	reg, err := simgpu.Create(filepath.Join(dir, "sim"), simgpu.Devices(1, simGPUMiB))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	w := newWatcher()
	uuid := simgpu.DeviceUUID(0)
	logPath := filepath.Join(dir, "filler.log")
	t.Cleanup(func() {
		if b, err := os.ReadFile(logPath); (t.Failed() || os.Getenv("MEMFILL_TEST_LOG") != "") && err == nil {
			t.Logf("helper log:\n%s", b)
		}
	})
	return &rig{reg: reg, uuid: uuid, watch: w, opts: Options{
		Path:    exe,
		Backend: "sim",
		UUID:    uuid,
		SimDir:  reg.Dir(),
		Socket:  filepath.Join(dir, "filler.sock"),
		LogPath: logPath,
		// The race detector would sleep a second at every helper exit.
		Env:     []string{"GORACE=" + os.Getenv("GORACE") + " atexit_sleep_ms=0"},
		OnState: w.on,
	}}
}

// killHelpersOf SIGKILLs every helper whose command line names dir: one a
// test left behind (detached, or superseded by an adoption) would otherwise
// hold its memory until its orphan timeout.
func killHelpersOf(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(dir)) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// start starts a helper and releases it when t ends, unless gone.
func (r *rig) start(t testing.TB) *Filler {
	t.Helper()
	f, err := Start(ctx(t), r.opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Release(context.Background()) })
	return f
}

// usage returns the device's used memory and the helper's share of it, from
// the registry.
func (r *rig) usage(t testing.TB, pid int) (used, held uint64) {
	t.Helper()
	snap, err := r.reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Procs {
		if p.PID == pid {
			held += p.UsedMiB
		}
	}
	return snap.Devices[0].UsedMiB, held
}

// hasRecord reports whether the registry has a record file for pid.
func (r *rig) hasRecord(pid int) bool {
	_, err := os.Stat(filepath.Join(r.reg.Dir(), "procs", strconv.Itoa(pid)+".json"))
	return err == nil
}

// ctx is a test's deadline for one step.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// watcher collects the states a Filler reports, to await one.
type watcher struct {
	mu      sync.Mutex
	last    State
	changed chan struct{} // closed and replaced on every state
}

func newWatcher() *watcher { return &watcher{changed: make(chan struct{})} }

func (w *watcher) on(st State) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = st
	close(w.changed)
	w.changed = make(chan struct{})
}

// await returns the first state reported that satisfies ok.
func (w *watcher) await(t testing.TB, what string, ok func(State) bool) State {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		w.mu.Lock()
		st, ch := w.last, w.changed
		w.mu.Unlock()
		if ok(st) {
			return st
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no state where %s; last %+v", what, st)
		}
	}
}

// otherProcess is a real process registered in the registry as another
// GPU user.
type otherProcess struct {
	pid   int
	start uint64
}

func startOther(t testing.TB) otherProcess {
	t.Helper()
	pid := testutil.Sleeper(t)
	start, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return otherProcess{pid: pid, start: start}
}
