package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
)

// apiFixture is a sim directory with two GPUs, the fake cuda-checkpoint
// linked into its own directory (for faults.json) and the fake libcuda.
type apiFixture struct {
	bins    testutil.Binaries
	reg     *simgpu.Registry
	toolDir string
	tool    string
	lib     string
}

func newAPIFixture(t *testing.T) *apiFixture {
	t.Helper()
	f := &apiFixture{lib: testutil.FakeLibcuda(t), bins: testutil.Build(t), toolDir: t.TempDir()}
	var err error
	if f.reg, err = simgpu.Create(filepath.Join(t.TempDir(), "sim"), simgpu.Devices(2, 8000)); err != nil {
		t.Fatal(err)
	}
	if f.tool, err = checkpointtest.Install(f.toolDir, f.bins.FakeCudaCheckpoint, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// options are the APIOptions that run the fake.
func (f *apiFixture) options(env ...string) APIOptions {
	return APIOptions{
		HelperPath: f.bins.Daemon,
		Library:    f.lib,
		Env:        append([]string{"GPUSCHED_FAKE_CUDA_CHECKPOINT=" + f.tool}, env...),
	}
}

// api starts an API on the fake, closed when the test ends.
func (f *apiFixture) api(t *testing.T, env ...string) *API {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := NewAPI(ctx, f.options(env...))
	if err != nil {
		t.Fatalf("NewAPI: %v", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// faults replaces the fake's faults.json.
func (f *apiFixture) faults(t *testing.T, faults checkpointtest.Faults) {
	t.Helper()
	if err := checkpointtest.WriteFaults(f.toolDir, faults); err != nil {
		t.Fatal(err)
	}
}

// job starts a simulated job holding 1000 MiB on GPU 0 and returns its pid
// once it has allocated.
func (f *apiFixture) job(t *testing.T) int {
	t.Helper()
	return f.jobOf(t, 1000)
}

// jobOf starts a simulated job holding mib MiB on GPU 0.
func (f *apiFixture) jobOf(t *testing.T, mib int) int {
	t.Helper()
	cmd := exec.Command(f.bins.SimJob, "--vram", strconv.Itoa(mib), "--hold", "3600")
	cmd.Env = append(os.Environ(), simgpu.EnvDir+"="+f.reg.Dir(), "CUDA_VISIBLE_DEVICES="+simgpu.DeviceUUID(0))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "allocated") {
			go func() {
				for sc.Scan() {
				}
			}()
			return cmd.Process.Pid
		}
	}
	t.Fatalf("simjob %d ended before allocating: %v", cmd.Process.Pid, sc.Err())
	return 0
}

// usage returns pid's simulated usage on GPU i.
func (f *apiFixture) usage(t *testing.T, pid, i int) uint64 {
	t.Helper()
	snap, err := f.reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snap.Procs {
		if p.PID == pid && p.UUID == simgpu.DeviceUUID(i) {
			return p.UsedMiB
		}
	}
	return 0
}

func apiCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func apiWantState(t *testing.T, a *API, pid int, want State) {
	t.Helper()
	got, err := a.State(apiCtx(t), pid)
	if err != nil {
		t.Fatalf("State(%d): %v", pid, err)
	}
	if got != want {
		t.Fatalf("State(%d) = %s, want %s", pid, got, want)
	}
}

func apiMust(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantOpError checks that err is an *OpError of class want for op.
func apiWantOpError(t *testing.T, err error, op string, want error) *OpError {
	t.Helper()
	var oe *OpError
	if !errors.As(err, &oe) || !errors.Is(err, want) || oe.Op != op {
		t.Fatalf("got %v (%T), want an %s *OpError matching %v", err, err, op, want)
	}
	return oe
}

func TestAPICycle(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	if got, want := a.Caps(), (Caps{Kind: "api", Version: "13.0", DeviceMap: true, RestoreTID: true}); got != want {
		t.Errorf("Caps() = %+v, want %+v", got, want)
	}
	pid := f.job(t)
	ctx := apiCtx(t)
	apiWantState(t, a, pid, StateRunning)
	apiMust(t, "lock", a.Lock(ctx, pid, 5*time.Second))
	apiWantState(t, a, pid, StateLocked)
	apiMust(t, "checkpoint", a.Checkpoint(ctx, pid))
	apiWantState(t, a, pid, StateCheckpointed)
	if got := f.usage(t, pid, 0); got != 0 {
		t.Errorf("checkpointed: usage on GPU 0 = %d MiB, want 0", got)
	}
	tid, err := a.RestoreThreadID(ctx, pid)
	apiMust(t, "restore tid", err)
	checkRestoreThread(t, pid, tid)
	apiMust(t, "restore", a.Restore(ctx, pid, nil))
	apiWantState(t, a, pid, StateLocked)
	if got := f.usage(t, pid, 0); got != 1000 {
		t.Errorf("restored: usage on GPU 0 = %d MiB, want 1000", got)
	}
	apiMust(t, "unlock", a.Unlock(ctx, pid))
	apiWantState(t, a, pid, StateRunning)
}

func TestAPIRestoreDeviceMap(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	ctx := apiCtx(t)
	apiMust(t, "lock", a.Lock(ctx, pid, 0))
	apiMust(t, "checkpoint", a.Checkpoint(ctx, pid))
	apiMust(t, "restore", a.Restore(ctx, pid, []GPUPair{{Old: simgpu.DeviceUUID(0), New: simgpu.DeviceUUID(1)}}))
	if u0, u1 := f.usage(t, pid, 0), f.usage(t, pid, 1); u0 != 0 || u1 != 1000 {
		t.Errorf("after restore onto GPU 1: usage %d MiB on GPU 0, %d MiB on GPU 1; want 0 and 1000", u0, u1)
	}
	apiMust(t, "unlock", a.Unlock(ctx, pid))
	apiWantState(t, a, pid, StateRunning)

	err := a.Restore(ctx, pid, []GPUPair{{Old: "GPU-nope", New: simgpu.DeviceUUID(1)}})
	if oe := apiWantOpError(t, err, "restore", ErrFailed); !strings.Contains(oe.Detail, "bad GPU uuid") {
		t.Errorf("bad uuid: detail %q", oe.Detail)
	}
}

func TestAPIErrors(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	ctx := apiCtx(t)

	err := a.Checkpoint(ctx, pid)
	if oe := apiWantOpError(t, err, "checkpoint", ErrIllegalState); oe.Detail != "CUDA_ERROR_ILLEGAL_STATE" || oe.PID != pid {
		t.Errorf("checkpoint of a running process: %+v", oe)
	}
	apiWantOpError(t, a.Unlock(ctx, pid), "unlock", ErrIllegalState)
	apiWantState(t, a, pid, StateRunning)

	// A process without CUDA (the test itself has no GPUSCHED_SIM_DIR).
	_, err = a.State(ctx, os.Getpid())
	if oe := apiWantOpError(t, err, "get-state", ErrNotCUDA); oe.Detail != "CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("state of a non-CUDA process: detail %q", oe.Detail)
	}
	_, err = a.State(ctx, 0)
	apiWantOpError(t, err, "get-state", ErrNotCUDA)

	// The lock timeout reaches the driver: the fake times out after it.
	f.faults(t, checkpointtest.Faults{"lock": {DelayMS: 5000}})
	start := time.Now()
	err = a.Lock(ctx, pid, 100*time.Millisecond)
	if oe := apiWantOpError(t, err, "lock", ErrTimeout); oe.Detail != "CUDA_ERROR_TIMEOUT" {
		t.Errorf("lock timeout: detail %q", oe.Detail)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("lock with a 100ms timeout took %v", d)
	}

	// An injected out-of-memory restore.
	f.faults(t, checkpointtest.Faults{"restore": {Error: "CUDA_ERROR_OUT_OF_MEMORY"}})
	apiMust(t, "lock", a.Lock(ctx, pid, 0))
	apiMust(t, "checkpoint", a.Checkpoint(ctx, pid))
	apiWantOpError(t, a.Restore(ctx, pid, nil), "restore", ErrOutOfMemory)
	apiWantState(t, a, pid, StateCheckpointed)
}

func TestAPIContextDeadline(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	f.faults(t, checkpointtest.Faults{"get-state": {DelayMS: 1500, Times: 1}})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := a.State(ctx, pid)
	apiWantOpError(t, err, "get-state", ErrTimeout)
	if d := time.Since(start); d > time.Second {
		t.Errorf("State under a 200ms deadline took %v", d)
	}
	// The late answer is dropped; the helper serves on.
	apiWantState(t, a, pid, StateRunning)
	time.Sleep(1500 * time.Millisecond)
	apiWantState(t, a, pid, StateRunning)

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	err = a.Unlock(ctx, pid)
	if apiWantOpError(t, err, "unlock", ErrFailed); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled call: %v does not match context.Canceled", err)
	}
}

func TestAPIConcurrentPIDs(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	slow, fast := f.job(t), f.job(t)
	f.faults(t, checkpointtest.Faults{"lock": {DelayMS: 2000, PIDs: []int{slow}}})
	ctx := apiCtx(t)
	var wg sync.WaitGroup
	var slowErr error
	var slowTook time.Duration
	start := time.Now()
	wg.Go(func() {
		slowErr = a.Lock(ctx, slow, 0)
		slowTook = time.Since(start)
	})
	time.Sleep(100 * time.Millisecond) // let the slow lock reach the fake
	fastStart := time.Now()
	apiMust(t, "lock fast pid", a.Lock(ctx, fast, 0))
	apiMust(t, "checkpoint fast pid", a.Checkpoint(ctx, fast))
	fastTook := time.Since(fastStart)
	wg.Wait()
	apiMust(t, "lock slow pid", slowErr)
	if slowTook < 2*time.Second {
		t.Errorf("slow lock took %v, want >= 2s (fault not applied?)", slowTook)
	}
	if fastTook > time.Second {
		t.Errorf("lock+checkpoint of the other pid took %v while the slow lock ran", fastTook)
	}
	apiWantState(t, a, slow, StateLocked)
	apiWantState(t, a, fast, StateCheckpointed)
}

func TestAPIHelperKilled(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	f.faults(t, checkpointtest.Faults{"lock": {DelayMS: 2000, Times: 1}})
	ctx := apiCtx(t)
	old := a.h.cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- a.Lock(ctx, pid, 0) }()
	time.Sleep(300 * time.Millisecond)
	apiMust(t, "kill helper", syscall.Kill(old, syscall.SIGKILL))
	select {
	case err := <-done:
		if oe := apiWantOpError(t, err, "lock", ErrFailed); !strings.Contains(oe.Detail, "killed") {
			t.Errorf("pending call: detail %q does not say the helper was killed", oe.Detail)
		}
	case <-time.After(1500 * time.Millisecond):
		t.Fatal("pending call did not fail when the helper died")
	}
	// The next call starts a new helper.
	apiWantState(t, a, pid, StateRunning)
	if a.h.cmd.Process.Pid == old {
		t.Error("helper not restarted")
	}

	// Killed while idle: at most the next call fails, the one after works.
	syscall.Kill(a.h.cmd.Process.Pid, syscall.SIGKILL)
	if _, err := a.State(ctx, pid); err != nil {
		apiWantOpError(t, err, "get-state", ErrFailed)
	}
	apiWantState(t, a, pid, StateRunning)
}

func TestAPIUnsupported(t *testing.T) {
	f := newAPIFixture(t)
	ctx := apiCtx(t)
	opts := f.options()
	opts.Library = testutil.FakeLibcuda(t, "-DNO_CHECKPOINT")
	_, err := NewAPI(ctx, opts)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "has no cuCheckpointProcess") {
		t.Errorf("library without the checkpoint API: %v", err)
	}

	opts.Library = filepath.Join(t.TempDir(), "libcuda.so.1")
	_, err = NewAPI(ctx, opts)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "no NVIDIA driver library") {
		t.Errorf("missing library: %v", err)
	}

	opts = f.options("FAKE_LIBCUDA_INIT_ERROR=100")
	_, err = NewAPI(ctx, opts)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
		t.Errorf("cuInit failing: %v", err)
	}

	// Drivers before 580 (CUDA 13.0) checkpoint but cannot remap GPUs, and
	// 570's (CUDA 12.8) fails on PyTorch processes.
	for _, tc := range []struct {
		version string
		caps    Caps
	}{
		{"12080", Caps{Kind: "api", Version: "12.8", RestoreTID: true, Warning: r570Warning}},
		{"12090", Caps{Kind: "api", Version: "12.9", RestoreTID: true}},
	} {
		a := f.api(t, "FAKE_LIBCUDA_VERSION="+tc.version)
		if c := a.Caps(); c != tc.caps {
			t.Errorf("driver %s: caps %+v, want %+v", tc.version, c, tc.caps)
		}
		err = a.Restore(ctx, 12345, []GPUPair{{Old: simgpu.DeviceUUID(0), New: simgpu.DeviceUUID(1)}})
		if oe := apiWantOpError(t, err, "restore", ErrUnsupported); !strings.Contains(oe.Detail, "needs CUDA 13.0 (driver 580)") {
			t.Errorf("driver %s: restore with a device map: %v", tc.version, err)
		}
	}
}

func TestAPIHelperStart(t *testing.T) {
	ctx := apiCtx(t)
	// A helper that exits without a ready line: its stderr is quoted.
	_, err := NewAPI(ctx, APIOptions{HelperPath: "/bin/sleep", Library: "bogus"})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "/bin/sleep exited (exit status 1); stderr: ") {
		t.Errorf("helper exiting at start: %v", err)
	}
	// One that never answers is killed when ctx ends.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = NewAPI(short, APIOptions{HelperPath: "/bin/sleep", Library: strconv.Itoa(30)})
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("silent helper: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("silent helper: NewAPI took %v", d)
	}
}

func TestAPIClose(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	h := a.h
	apiMust(t, "close", a.Close())
	if !h.exited() {
		t.Error("helper still running after Close")
	}
	_, err := a.State(apiCtx(t), pid)
	apiWantOpError(t, err, "get-state", ErrFailed)
	apiMust(t, "second close", a.Close())
}

// TestAPIHelperOnTheUsersCPUs: under --daemon-cpus the CUDA helper, which
// works for users' freezes and thaws, is born on the CPUs the daemon gives
// users; the thread that started it, which it is bound to for its
// parent-death signal, keeps the daemon's own through its life and after.
func TestAPIHelperOnTheUsersCPUs(t *testing.T) {
	daemonCPUs, userCPUs := testutil.ConfineSelf(t)
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	apiWantState(t, a, pid, StateRunning)
	testutil.WantThreadsOn(t, "the CUDA helper", a.h.cmd.Process.Pid, userCPUs)
	testutil.WantThreadsOn(t, "this process", os.Getpid(), daemonCPUs)
	apiMust(t, "close", a.Close())
	testutil.WantThreadsOn(t, "this process, the helper gone", os.Getpid(), daemonCPUs)
}

// TestDriverErrorsAsNVIDIAs runs the failures whose class the real stack
// decides through both drivers on one fake: the CLI reads the tool's error
// line and exit status, the API the CUresult the fake libcuda maps back
// from them.
func TestDriverErrorsAsNVIDIAs(t *testing.T) {
	f := newAPIFixture(t)
	cli, err := NewCLI(apiCtx(t), CLIOptions{Path: f.tool})
	apiMust(t, "NewCLI", err)
	for _, d := range []struct {
		name string
		drv  Driver
	}{{"cli", cli}, {"api", f.api(t)}} {
		t.Run(d.name, func(t *testing.T) {
			ctx := apiCtx(t)
			drv := d.drv
			pid := f.job(t)

			// A lock past its timeout, as TIMEOUT or as NOT_READY.
			f.faults(t, checkpointtest.Faults{"lock": {DelayMS: 60000}})
			apiWantOpError(t, drv.Lock(ctx, pid, 50*time.Millisecond), "lock", ErrTimeout)
			f.faults(t, checkpointtest.Faults{"lock": {Error: "CUDA_ERROR_NOT_READY", Times: 1}})
			err := drv.Lock(ctx, pid, time.Second)
			if oe := apiWantOpError(t, err, "lock", ErrTimeout); !strings.Contains(oe.Detail, "CUDA_ERROR_NOT_READY") {
				t.Errorf("lock answering NOT_READY: detail %q", oe.Detail)
			}
			checkState(t, drv, pid, StateRunning)
			f.faults(t, nil)
			apiMust(t, "lock", drv.Lock(ctx, pid, time.Second))
			apiMust(t, "checkpoint", drv.Checkpoint(ctx, pid))

			// A device map onto a GPU the driver does not have is refused,
			// the process left checkpointed.
			bad := []GPUPair{{Old: simgpu.DeviceUUID(0), New: simgpu.DeviceUUID(7)}}
			err = drv.Restore(ctx, pid, bad)
			if oe := apiWantOpError(t, err, "restore", ErrRejected); !strings.Contains(oe.Detail, "CUDA_ERROR_INVALID_VALUE") {
				t.Errorf("bad device map: detail %q", oe.Detail)
			}
			checkState(t, drv, pid, StateCheckpointed)

			// Out of memory on restore; once the memory frees, every later
			// restore fails with OPERATING_SYSTEM (NVIDIA/cuda-checkpoint#44).
			filler := f.jobOf(t, 7500)
			apiWantOpError(t, drv.Restore(ctx, pid, nil), "restore", ErrOutOfMemory)
			checkState(t, drv, pid, StateCheckpointed)
			apiMust(t, "kill filler", killJob(filler))
			err = drv.Restore(ctx, pid, nil)
			if oe := apiWantOpError(t, err, "restore", ErrFailed); !strings.Contains(oe.Detail, "CUDA_ERROR_OPERATING_SYSTEM") {
				t.Errorf("restore after an out-of-memory one: detail %q", oe.Detail)
			}
			checkState(t, drv, pid, StateCheckpointed)
		})
	}
}

// TestAPIHelperDeadWhilePipesHeld: a helper that died idle while another
// process holds copies of its pipes (as a child the daemon forks holds
// them until its exec) is known dead by its state, not by the end of its
// stdout: the next call goes to a new helper and succeeds.
func TestAPIHelperDeadWhilePipesHeld(t *testing.T) {
	f := newAPIFixture(t)
	a := f.api(t)
	pid := f.job(t)
	old := a.h.cmd.Process.Pid
	stdin, err := os.Open(fmt.Sprintf("/proc/%d/fd/0", old)) // the read end of its requests
	apiMust(t, "hold its stdin", err)
	defer stdin.Close()
	stdout, err := os.OpenFile(fmt.Sprintf("/proc/%d/fd/1", old), os.O_WRONLY, 0) // the write end of its answers
	apiMust(t, "hold its stdout", err)
	defer stdout.Close()
	pidfd, err := unix.PidfdOpen(old, 0)
	apiMust(t, "pidfd of the helper", err)
	defer unix.Close(pidfd)
	apiMust(t, "kill helper", syscall.Kill(old, syscall.SIGKILL))
	if _, err := unix.Poll([]unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}, 30_000); err != nil { // readable once it has exited
		t.Fatal(err)
	}
	apiWantState(t, a, pid, StateRunning)
	if a.h.cmd.Process.Pid == old {
		t.Error("the dead helper was asked again")
	}
}
