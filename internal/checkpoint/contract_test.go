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
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
)

// contractTimeout only bounds a test that would otherwise hang.
const contractTimeout = 30 * time.Second

// driverHarness is one driver under test on its own simulated GPUs.
type driverHarness struct {
	drv Driver
	reg *simgpu.Registry
	// slowCheckpoint returns a driver on the same GPUs whose checkpoint
	// takes a minute (a hung tool, a slow host link).
	slowCheckpoint func(t *testing.T) Driver
}

// driverKinds are the drivers the contract runs against.
var driverKinds = []struct {
	name string
	new  func(t *testing.T, reg *simgpu.Registry) *driverHarness
}{
	{"cli", newCLIHarness},
	{"sim", newSimHarness},
}

// newCLIHarness installs the fake cuda-checkpoint in a per-test directory.
func newCLIHarness(t *testing.T, reg *simgpu.Registry) *driverHarness {
	dir := t.TempDir()
	drv := newFakeCLI(t, dir, nil)
	return &driverHarness{drv: drv, reg: reg, slowCheckpoint: func(t *testing.T) Driver {
		writeFaults(t, dir, checkpointtest.Faults{"checkpoint": {DelayMS: 60000}})
		return drv
	}}
}

func newSimHarness(t *testing.T, reg *simgpu.Registry) *driverHarness {
	drv, err := NewSim(reg.Dir(), SimOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &driverHarness{drv: drv, reg: reg, slowCheckpoint: func(t *testing.T) Driver {
		slow, err := NewSim(reg.Dir(), SimOptions{CheckpointPerGiB: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return slow
	}}
}

// newFakeCLI installs the fake (and faults, if not nil) in dir and opens a
// CLI driver on it.
func newFakeCLI(t *testing.T, dir string, faults checkpointtest.Faults) *CLI {
	t.Helper()
	link, err := checkpointtest.Install(dir, testutil.Build(t).FakeCudaCheckpoint, faults)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := NewCLI(context.Background(), CLIOptions{Path: link})
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

func writeFaults(t *testing.T, dir string, faults checkpointtest.Faults) {
	t.Helper()
	if err := checkpointtest.WriteFaults(dir, faults); err != nil {
		t.Fatal(err)
	}
}

// newSimGPUs creates count simulated GPUs of size MiB.
func newSimGPUs(t testing.TB, count int, size uint64) *simgpu.Registry {
	t.Helper()
	reg, err := simgpu.Create(t.TempDir(), simgpu.Devices(count, size))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// startSimJob runs gpusched-simjob holding mib MiB on GPU gpu and returns its
// pid once the memory is registered. It is killed when t ends.
func startSimJob(t testing.TB, reg *simgpu.Registry, gpu int, mib uint64) int {
	t.Helper()
	return startSimJobOn(t, reg, strconv.Itoa(gpu), mib)
}

// startSimJobOn is startSimJob holding mib MiB on each of gpus, a
// CUDA_VISIBLE_DEVICES list.
func startSimJobOn(t testing.TB, reg *simgpu.Registry, gpus string, mib uint64) int {
	t.Helper()
	cmd := exec.Command(testutil.Build(t).SimJob, "--vram", strconv.FormatUint(mib, 10))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), simgpu.EnvDir + "=" + reg.Dir(),
		"CUDA_VISIBLE_DEVICES=" + gpus}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopCmd(cmd) })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for n := strings.Count(gpus, ",") + 1; sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "simjob: allocated ") {
				if n--; n == 0 {
					ready <- true
					return
				}
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("simjob ended before allocating: %s", stderr.String())
		}
	case <-time.After(contractTimeout):
		t.Fatal("simjob did not allocate")
	}
	return cmd.Process.Pid
}

func stopCmd(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// startJobCmd is startSimJob returning the command, for tests that end it.
func gpuUsed(t *testing.T, reg *simgpu.Registry, gpu int) uint64 {
	t.Helper()
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap.Devices[gpu].UsedMiB
}

// checkRestoreThread checks that tid is a thread of process pid other than
// its main thread, as CUDA's restore thread is.
func checkRestoreThread(t *testing.T, pid, tid int) {
	t.Helper()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d", pid, tid)); err != nil || tid == pid {
		t.Errorf("restore thread %d of process %d: %v; want a thread of its own", tid, pid, err)
	}
}

func checkState(t *testing.T, drv Driver, pid int, want State) {
	t.Helper()
	got, err := drv.State(context.Background(), pid)
	if err != nil || got != want {
		t.Fatalf("State(%d) = %q, %v; want %q", pid, got, err, want)
	}
}

func checkOpErr(t *testing.T, err, class error, op string) {
	t.Helper()
	var e *OpError
	if !errors.Is(err, class) || !errors.As(err, &e) || e.Op != op {
		t.Fatalf("error %v: want an *OpError of %s matching %v", err, op, class)
	}
}

// contractStep is one driver call and its expected outcome.
type contractStep struct {
	op    string // lock, checkpoint, restore, unlock
	class error  // nil: success
	after State
}

func (s contractStep) run(ctx context.Context, drv Driver, pid int) error {
	switch s.op {
	case "lock":
		return drv.Lock(ctx, pid, 5*time.Second)
	case "checkpoint":
		return drv.Checkpoint(ctx, pid)
	case "restore":
		return drv.Restore(ctx, pid, nil)
	case "unlock":
		return drv.Unlock(ctx, pid)
	}
	panic("unknown op " + s.op)
}

// TestDriverContract runs the same cases against every driver.
func TestDriverContract(t *testing.T) {
	testutil.Build(t)
	for _, kind := range driverKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Run("FullCycleMovesVRAM", func(t *testing.T) { contractFullCycle(t, kind.new) })
			t.Run("IllegalTransitions", func(t *testing.T) { contractIllegal(t, kind.new) })
			t.Run("RestoreOOM", func(t *testing.T) { contractRestoreOOM(t, kind.new) })
			t.Run("RestoreDeviceMap", func(t *testing.T) { contractDeviceMap(t, kind.new) })
			t.Run("RestoreMapListsEveryGPU", func(t *testing.T) { contractMapEveryGPU(t, kind.new) })
			t.Run("RestoreMapSameChip", func(t *testing.T) { contractMapSameChip(t, kind.new) })
			t.Run("RestoreNeedsRestoreThread", func(t *testing.T) { contractRestoreThread(t, kind.new) })
			t.Run("NotCUDA", func(t *testing.T) { contractNotCUDA(t, kind.new) })
			t.Run("DeadlineTruthfulState", func(t *testing.T) { contractDeadline(t, kind.new) })
		})
	}
}

type newDriverHarness = func(t *testing.T, reg *simgpu.Registry) *driverHarness

func contractFullCycle(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 2, 4096))
	pid := startSimJob(t, h.reg, 0, 1000)
	ctx := context.Background()
	checkState(t, h.drv, pid, StateRunning)
	for _, s := range []struct {
		contractStep
		used uint64 // on GPU 0 after the contractStep
	}{
		{contractStep{"lock", nil, StateLocked}, 1000},
		{contractStep{"checkpoint", nil, StateCheckpointed}, 0},
		{contractStep{"restore", nil, StateLocked}, 1000},
		{contractStep{"unlock", nil, StateRunning}, 1000},
	} {
		if err := s.run(ctx, h.drv, pid); err != nil {
			t.Fatalf("%s: %v", s.op, err)
		}
		checkState(t, h.drv, pid, s.after)
		if got := gpuUsed(t, h.reg, 0); got != s.used {
			t.Errorf("after %s: %d MiB used on GPU 0, want %d", s.op, got, s.used)
		}
	}
	if !h.drv.Caps().RestoreTID {
		t.Fatal("RestoreTID not supported")
	}
	tid, err := h.drv.RestoreThreadID(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	checkRestoreThread(t, pid, tid)
	if err := h.drv.Close(); err != nil {
		t.Error(err)
	}
}

func contractIllegal(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 1, 4096))
	pid := startSimJob(t, h.reg, 0, 500)
	ctx := context.Background()
	for i, s := range []contractStep{
		{"checkpoint", ErrIllegalState, StateRunning},
		{"restore", ErrIllegalState, StateRunning},
		{"unlock", ErrIllegalState, StateRunning},
		{"lock", nil, StateLocked},
		{"lock", ErrIllegalState, StateLocked},
		{"restore", ErrIllegalState, StateLocked},
		{"checkpoint", nil, StateCheckpointed},
		{"lock", ErrIllegalState, StateCheckpointed},
		{"checkpoint", ErrIllegalState, StateCheckpointed},
		{"unlock", ErrIllegalState, StateCheckpointed},
	} {
		err := s.run(ctx, h.drv, pid)
		if s.class == nil && err != nil {
			t.Fatalf("contractStep %d %s: %v", i, s.op, err)
		}
		if s.class != nil {
			checkOpErr(t, err, s.class, s.op)
		}
		checkState(t, h.drv, pid, s.after)
	}
	if got := gpuUsed(t, h.reg, 0); got != 0 {
		t.Errorf("%d MiB used while checkpointed", got)
	}
}

func contractRestoreOOM(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 1, 2048))
	pid := startSimJob(t, h.reg, 0, 1000)
	ctx := context.Background()
	for _, op := range []string{"lock", "checkpoint"} {
		if err := (contractStep{op: op}).run(ctx, h.drv, pid); err != nil {
			t.Fatal(err)
		}
	}
	// Another job takes the memory while the first is checkpointed.
	filler := startSimJob(t, h.reg, 0, 1500)
	err := h.drv.Restore(ctx, pid, nil)
	checkOpErr(t, err, ErrOutOfMemory, "restore")
	if !strings.Contains(err.Error(), "out of memory") {
		t.Errorf("error %q does not quote the out-of-memory detail", err)
	}
	checkState(t, h.drv, pid, StateCheckpointed)
	if got := gpuUsed(t, h.reg, 0); got != 1500 {
		t.Errorf("%d MiB used after the failed restore, want the filler's 1500", got)
	}

	// NVIDIA/cuda-checkpoint#44: with the memory free again, restore fails
	// with CUDA_ERROR_OPERATING_SYSTEM and unlock is illegal, for good.
	if err := killJob(filler); err != nil {
		t.Fatal(err)
	}
	err = h.drv.Restore(ctx, pid, nil)
	checkOpErr(t, err, ErrFailed, "restore")
	if !strings.Contains(err.Error(), "OS call failed") {
		t.Errorf("restore after the out-of-memory one: %v, want the driver's OS call failure", err)
	}
	checkOpErr(t, h.drv.Unlock(ctx, pid), ErrIllegalState, "unlock")
	checkState(t, h.drv, pid, StateCheckpointed)
	if got := gpuUsed(t, h.reg, 0); got != 0 {
		t.Errorf("%d MiB used after the refused restore, want 0", got)
	}
}

// killJob kills and reaps a job started by startSimJob (its cleanup then
// finds it gone).
func killJob(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	if err := p.Kill(); err != nil {
		return err
	}
	_, err = p.Wait()
	return err
}

func contractDeviceMap(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 2, 4096))
	gpu0, gpu1 := simgpu.DeviceUUID(0), simgpu.DeviceUUID(1)
	pid := startSimJob(t, h.reg, 0, 1000)
	ctx := context.Background()
	if !h.drv.Caps().DeviceMap {
		t.Fatal("DeviceMap not supported")
	}
	for _, op := range []string{"lock", "checkpoint"} {
		if err := (contractStep{op: op}).run(ctx, h.drv, pid); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.drv.Restore(ctx, pid, []GPUPair{{Old: gpu0, New: gpu1}}); err != nil {
		t.Fatal(err)
	}
	checkState(t, h.drv, pid, StateLocked)
	if u0, u1 := gpuUsed(t, h.reg, 0), gpuUsed(t, h.reg, 1); u0 != 0 || u1 != 1000 {
		t.Errorf("used after restore onto GPU 1: %d and %d MiB, want 0 and 1000", u0, u1)
	}
	if err := h.drv.Unlock(ctx, pid); err != nil {
		t.Fatal(err)
	}
}

// checkpointed locks and checkpoints pid through h's driver.
func (h *driverHarness) checkpointed(t *testing.T, pid int) {
	t.Helper()
	for _, op := range []string{"lock", "checkpoint"} {
		if err := (contractStep{op: op}).run(context.Background(), h.drv, pid); err != nil {
			t.Fatal(err)
		}
	}
}

// contractMapEveryGPU restores a process on two GPUs with a map that moves
// one of them: a map without the other is refused and moves nothing
// (cuCheckpointProcessRestore: "it must contain every checkpointed GPU";
// NVIDIA/cuda-checkpoint#35), and one with an identity pair for it works.
func contractMapEveryGPU(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 3, 4096))
	gpu0, gpu1, gpu2 := simgpu.DeviceUUID(0), simgpu.DeviceUUID(1), simgpu.DeviceUUID(2)
	pid := startSimJobOn(t, h.reg, "0,1", 1000)
	h.checkpointed(t, pid)
	ctx := context.Background()
	if err := h.drv.Restore(ctx, pid, []GPUPair{{Old: gpu1, New: gpu2}}); err == nil {
		t.Fatal("restore with a map that leaves out GPU 0 succeeded")
	}
	checkState(t, h.drv, pid, StateCheckpointed)
	for i := range 3 {
		if got := gpuUsed(t, h.reg, i); got != 0 {
			t.Fatalf("GPU %d: %d MiB used after the refused restore", i, got)
		}
	}
	if err := h.drv.Restore(ctx, pid, []GPUPair{{Old: gpu0, New: gpu0}, {Old: gpu1, New: gpu2}}); err != nil {
		t.Fatal(err)
	}
	if u0, u1, u2 := gpuUsed(t, h.reg, 0), gpuUsed(t, h.reg, 1), gpuUsed(t, h.reg, 2); u0 != 1000 || u1 != 0 || u2 != 1000 {
		t.Errorf("used after the restore: %d, %d, %d MiB; want 1000, 0, 1000", u0, u1, u2)
	}
}

// contractMapSameChip restores only onto a GPU of the same chip type
// ("The GPU to restore onto needs to ... be of the same chip type").
func contractMapSameChip(t *testing.T, newH newDriverHarness) {
	devs := simgpu.Devices(3, 4096)
	devs[2].Name = "NVIDIA A100-SXM4-40GB"
	reg, err := simgpu.Create(t.TempDir(), devs)
	if err != nil {
		t.Fatal(err)
	}
	h := newH(t, reg)
	pid := startSimJob(t, reg, 0, 1000)
	h.checkpointed(t, pid)
	ctx := context.Background()
	if err := h.drv.Restore(ctx, pid, []GPUPair{{Old: devs[0].UUID, New: devs[2].UUID}}); err == nil {
		t.Fatal("restore onto another chip succeeded")
	}
	checkState(t, h.drv, pid, StateCheckpointed)
	if err := h.drv.Restore(ctx, pid, []GPUPair{{Old: devs[0].UUID, New: devs[1].UUID}}); err != nil {
		t.Fatal(err)
	}
	if got := gpuUsed(t, reg, 1); got != 1000 {
		t.Errorf("%d MiB on GPU 1 after the restore, want 1000", got)
	}
}

// contractRestoreThread restores a process whose threads are all stopped
// (SIGSTOP): the restore does not proceed while its restore thread is
// stopped, so it fails at its deadline and changes nothing, and works once
// the process runs. The state is asked once it runs: the driver answers
// nothing for a stopped process (a lent H200, docs/hardware.md).
func contractRestoreThread(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 1, 4096))
	pid := startSimJob(t, h.reg, 0, 1000)
	h.checkpointed(t, pid)
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	checkOpErr(t, h.drv.Restore(ctx, pid, nil), ErrTimeout, "restore")
	if err := unix.Kill(pid, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	checkState(t, h.drv, pid, StateCheckpointed)
	if err := h.drv.Restore(context.Background(), pid, nil); err != nil {
		t.Fatalf("restore once the process runs: %v", err)
	}
	checkState(t, h.drv, pid, StateLocked)
}

func contractNotCUDA(t *testing.T, newH newDriverHarness) {
	reg := newSimGPUs(t, 1, 1024)
	h := newH(t, reg)
	// A live process with the sim directory in its environment but no
	// simulated GPU memory, and a pid that is gone.
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{simgpu.EnvDir + "=" + reg.Dir()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopCmd(cmd)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, pid := range []int{cmd.Process.Pid, gone.Process.Pid} {
		_, err := h.drv.State(ctx, pid)
		checkOpErr(t, err, ErrNotCUDA, "get-state")
		checkOpErr(t, h.drv.Lock(ctx, pid, time.Second), ErrNotCUDA, "lock")
		_, err = h.drv.RestoreThreadID(ctx, pid)
		checkOpErr(t, err, ErrNotCUDA, "get-restore-tid")
	}
}

// contractDeadline checks that a checkpoint outliving its deadline fails
// promptly with ErrTimeout, and that State then tells the truth, agreeing
// with where the memory is.
func contractDeadline(t *testing.T, newH newDriverHarness) {
	h := newH(t, newSimGPUs(t, 1, 4096))
	pid := startSimJob(t, h.reg, 0, 1000)
	if err := h.drv.Lock(context.Background(), pid, time.Second); err != nil {
		t.Fatal(err)
	}
	slow := h.slowCheckpoint(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := slow.Checkpoint(ctx, pid)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("checkpoint returned %v after a 200ms deadline", took)
	}
	checkOpErr(t, err, ErrTimeout, "checkpoint")
	state, err := h.drv.State(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	want := map[State]uint64{StateLocked: 1000, StateCheckpointed: 0}
	used, ok := want[state]
	if !ok {
		t.Fatalf("state after the deadline %q, want locked or checkpointed", state)
	}
	if got := gpuUsed(t, h.reg, 0); got != used {
		t.Errorf("state %s but %d MiB used, want %d", state, got, used)
	}
}

// fakeProcs lists the live processes whose argv[0] is link.
func fakeProcs(t *testing.T, link string) []int {
	t.Helper()
	return pidsWhere(t, func(_ int, argv []string) bool { return len(argv) > 0 && argv[0] == link })
}

// pidsWhere lists the live processes that match says are wanted, given
// each one's pid and command line.
func pidsWhere(t *testing.T, match func(pid int, argv []string) bool) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && match(pid, strings.Split(string(cmdline), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
