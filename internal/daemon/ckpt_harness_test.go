package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// drivers are the checkpoint drivers every freeze/thaw behaviour is tested
// through: the simulated in-process driver, the cuda-checkpoint CLI path
// (the fake tool) and the libcuda helper (the fake library, which runs the
// fake tool).
var drivers = []string{config.DriverSim, config.DriverCLI, config.DriverAPI}

// ckptHarness is a daemon on two small simulated GPUs (4 GiB each) with a
// chosen checkpoint driver. With the CLI driver, the fake cuda-checkpoint
// runs from ccDir, where faults.json injects failures.
type ckptHarness struct {
	*harness
	ccDir string
	reg   *simgpu.Registry
}

func newCkptHarness(t testing.TB, driver string, mods ...func(*config.Config)) *ckptHarness {
	t.Helper()
	h := prepareCkpt(t, driver, mods...)
	h.begin()
	return h
}

// prepareCkpt sets up a ckptHarness without starting its daemon, so that
// faults can be in place before the driver is probed.
func prepareCkpt(t testing.TB, driver string, mods ...func(*config.Config)) *ckptHarness {
	t.Helper()
	h := prepareHarness(t, append([]func(*config.Config){func(c *config.Config) {
		c.Sim = "2x4G"
		c.CheckpointDriver = driver
		c.ThawMarginMiB = 0
		c.SimCheckpointGiB, c.SimRestoreGiB = 0, 0
	}}, mods...)...)
	ch := &ckptHarness{harness: h}
	if driver == config.DriverCLI || driver == config.DriverAPI {
		ch.ccDir = filepath.Join(h.dir, "cc")
		if err := os.MkdirAll(ch.ccDir, 0o755); err != nil {
			t.Fatal(err)
		}
		tool, err := checkpointtest.Install(ch.ccDir, h.bins.FakeCudaCheckpoint, nil)
		if err != nil {
			t.Fatal(err)
		}
		h.cfg.CudaCheckpoint = tool
		if driver == config.DriverAPI {
			h.cfg.Libcuda = testutil.FakeLibcuda(t)
			t.Setenv("GPUSCHED_FAKE_CUDA_CHECKPOINT", tool) // read by the fake libcuda in the helper
		}
	}
	return ch
}

// begin starts the daemon.
func (h *ckptHarness) begin() {
	h.t.Helper()
	h.start()
	reg, err := simgpu.Open(h.cfg.SimDir)
	if err != nil {
		h.t.Fatal(err)
	}
	// A simulated process stopped holding its user's lock fails the test
	// that looks, naming the user, rather than holding it until go test's
	// timeout (one run hung 17 minutes so).
	reg.SetLockWait(30 * time.Second)
	h.reg = reg
}

// faults replaces the fake cuda-checkpoint's faults.json (and its counters).
func (h *ckptHarness) faults(js string) {
	h.t.Helper()
	if h.ccDir == "" {
		h.t.Fatal("faults need the CLI driver")
	}
	var f checkpointtest.Faults
	if err := json.Unmarshal([]byte(js), &f); err != nil {
		h.t.Fatalf("faults %s: %v", js, err)
	}
	if err := checkpointtest.WriteFaults(h.ccDir, f); err != nil {
		h.t.Fatal(err)
	}
}

// jobs runs name as a shell tree of simulated GPU jobs on one GPU, one per
// vram amount (MiB), and waits until each has allocated.
func (h *ckptHarness) jobs(name string, gpu int, vrams ...int) *api.Process {
	h.t.Helper()
	var script []string
	for _, v := range vrams {
		script = append(script, fmt.Sprintf("%s --vram %d --tick 0.02 &", h.bins.SimJob, v))
	}
	script = append(script, "wait")
	_, err := h.client().Run(ctxT(h.t), api.RunParams{Name: name, Dir: "/", GPU: &api.GPURef{Index: gpu},
		Cmd: []string{"sh", "-c", strings.Join(script, " ")}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		h.t.Fatalf("run %s: %v", name, err)
	}
	h.followCount(name, "simjob: allocated", len(vrams))
	if h.d != nil {
		h.refresh()
	}
	p, err := h.client().Process(ctxT(h.t), name)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *ckptHarness) refresh() {
	h.t.Helper()
	if err := h.d.sampler.refresh(ctxT(h.t)); err != nil {
		h.t.Fatal(err)
	}
}

// used is a simulated GPU's used memory, read straight from the registry.
func (h *ckptHarness) used(gpu int) uint64 {
	h.t.Helper()
	snap, err := h.reg.Snapshot()
	if err != nil {
		h.t.Fatal(err)
	}
	return snap.Devices[gpu].UsedMiB
}

func (h *ckptHarness) proc(name string) *api.Process {
	h.t.Helper()
	p, err := h.client().Process(ctxT(h.t), name)
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

// cudaPIDs are the simulated CUDA processes of name's tree.
func (h *ckptHarness) cudaPIDs(name string) []int {
	h.t.Helper()
	init := h.proc(name).InitPID
	tree, err := procfs.ScanTree()
	if err != nil {
		h.t.Fatal(err)
	}
	var out []int
	for _, pid := range tree.Descendants(init) {
		if _, err := h.reg.CheckpointState(pid); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// cudaStates are the driver-side states of name's CUDA processes.
func (h *ckptHarness) cudaStates(name string) []string {
	h.t.Helper()
	var out []string
	for _, pid := range h.cudaPIDs(name) {
		st, err := h.reg.CheckpointState(pid)
		if errors.Is(err, simgpu.ErrLockHeld) {
			h.t.Fatalf("the CUDA state of %s's process %d: %v", name, pid, err)
		}
		out = append(out, st)
	}
	return out
}

// stopped reports whether every process of name's tree is stopped (T) or
// about to stop: CRIU leaves a tree stopped by sending SIGSTOP just before
// PTRACE_DETACH (finalize_restore in criu/cr-restore.c,
// compel_resume_task_sig in compel/src/lib/infect.c), so a process may run
// in the kernel for a moment with the signal pending, but not in user code.
func (h *ckptHarness) stopped(name string) bool {
	h.t.Helper()
	init := h.proc(name).InitPID
	tree, err := procfs.ScanTree()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, pid := range append(tree.Descendants(init), init) {
		if st, err := procfs.ReadStat(pid); err == nil && st.State != 'T' && st.State != 't' && !stopPending(pid) {
			return false
		}
	}
	return true
}

// stopPending reports whether SIGSTOP is pending for pid, to it or to its
// thread group (SigPnd, ShdPnd in /proc/PID/status, proc(5)).
func stopPending(pid int) bool {
	b, err := procfs.ReadFile(procfs.Path(pid, "/status"), procfs.MaxStatus)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(unix.SIGSTOP-1)) != 0 {
			return true
		}
	}
	return false
}

// waitStopped waits until name's tree is stopped (or not) as want says;
// SIGSTOP takes effect asynchronously.
func (h *ckptHarness) waitStopped(name string, want bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.stopped(name) != want {
		if time.Now().After(deadline) {
			h.t.Fatalf("tree of %s: stopped=%v, want %v", name, !want, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func allEqual(xs []string, want string) bool {
	for _, x := range xs {
		if x != want {
			return false
		}
	}
	return len(xs) > 0
}

// wantCode fails t unless err carries code.
func wantCode(t *testing.T, err error, code api.Code) {
	t.Helper()
	if api.CodeOf(err) != code {
		t.Fatalf("error %v (code %q), want code %q", err, api.CodeOf(err), code)
	}
}
