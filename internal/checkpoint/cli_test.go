package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/execx"
	"github.com/gpusched/gpusched/internal/testutil"
)

// cliFixture is the fake cuda-checkpoint in a per-test directory, one
// simulated job on two GPUs, and a CLI driver.
type cliFixture struct {
	dir string
	cli *CLI
	pid int
}

func newCLIFixture(t *testing.T) *cliFixture {
	t.Helper()
	reg := newSimGPUs(t, 2, 4096)
	dir := t.TempDir()
	return &cliFixture{dir: dir, cli: newFakeCLI(t, dir, nil), pid: startSimJob(t, reg, 0, 1000)}
}

func (f *cliFixture) do(t *testing.T, ops ...string) {
	t.Helper()
	for _, op := range ops {
		if err := (contractStep{op: op}).run(context.Background(), f.cli, f.pid); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
}

func TestCLILockTimeout(t *testing.T) {
	f := newCLIFixture(t)
	writeFaults(t, f.dir, checkpointtest.Faults{"lock": {DelayMS: 20000}})
	start := time.Now()
	err := f.cli.Lock(context.Background(), f.pid, 100*time.Millisecond)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Lock took %v with a 100ms timeout", took)
	}
	checkOpErr(t, err, ErrTimeout, "lock")
	want := fmt.Sprintf(`Could not lock on process ID %d: "the operation timed out" (CUDA_ERROR_TIMEOUT, exit status 141)`, f.pid)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not quote the tool as %q", err, want)
	}
	checkState(t, f.cli, f.pid, StateRunning)

	// A delay within the timeout only slows the lock down.
	writeFaults(t, f.dir, checkpointtest.Faults{"lock": {DelayMS: 10}})
	if err := f.cli.Lock(context.Background(), f.pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	checkState(t, f.cli, f.pid, StateLocked)
}

func TestCLIInjectedFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults checkpointtest.Faults
		before []string // steps that succeed first
		op     string   // then this one fails
		class  error
		after  State
		retry  bool // and succeeds on a second try
	}{
		{"checkpoint once", checkpointtest.Faults{"checkpoint": {Error: "CUDA_ERROR_UNKNOWN", Times: 1}},
			[]string{"lock"}, "checkpoint", ErrFailed, StateLocked, true},
		{"restore leaves failed", checkpointtest.Faults{"restore": {Error: "CUDA_ERROR_UNKNOWN", Leave: "failed"}},
			[]string{"lock", "checkpoint"}, "restore", ErrFailed, StateFailed, false},
		{"unlock always", checkpointtest.Faults{"unlock": {Error: "CUDA_ERROR_NOT_SUPPORTED"}},
			[]string{"lock"}, "unlock", ErrNotCheckpointable, StateLocked, false},
		{"lock twice", checkpointtest.Faults{"lock": {Error: "CUDA_ERROR_ILLEGAL_STATE", Times: 2}},
			nil, "lock", ErrIllegalState, StateRunning, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCLIFixture(t)
			writeFaults(t, f.dir, tc.faults)
			f.do(t, tc.before...)
			err := (contractStep{op: tc.op}).run(context.Background(), f.cli, f.pid)
			checkOpErr(t, err, tc.class, tc.op)
			if !strings.Contains(err.Error(), fmt.Sprintf("Could not %s on process ID %d: ", tc.op, f.pid)) {
				t.Errorf("error %q lacks the tool's words", err)
			}
			checkState(t, f.cli, f.pid, tc.after)
			if tc.retry {
				f.do(t, tc.op)
			}
		})
	}
}

func TestCLIFaultFilters(t *testing.T) {
	f := newCLIFixture(t)
	writeFaults(t, f.dir, checkpointtest.Faults{
		"lock":   {Error: "CUDA_ERROR_UNKNOWN", PIDs: []int{f.pid + 100000}},
		"unlock": {Error: "CUDA_ERROR_UNKNOWN", Times: 2, PIDs: []int{f.pid}},
	})
	f.do(t, "lock") // the fault names another pid
	for range 2 {
		checkOpErr(t, f.cli.Unlock(context.Background(), f.pid), ErrFailed, "unlock")
	}
	f.do(t, "unlock")
	checkState(t, f.cli, f.pid, StateRunning)
}

// TestCLIFaultTimesParallel checks that concurrent calls count right.
func TestCLIFaultTimesParallel(t *testing.T) {
	f := newCLIFixture(t)
	writeFaults(t, f.dir, checkpointtest.Faults{"get-state": {Error: "CUDA_ERROR_UNKNOWN", Times: 3}})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = f.cli.State(context.Background(), f.pid) })
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			checkOpErr(t, err, ErrFailed, "get-state")
			failed++
		}
	}
	if failed != 3 {
		t.Errorf("%d of 8 calls failed, want exactly 3", failed)
	}
}

// TestCLIErrorClasses injects each CUresult into the fake, which fails as
// the real tool does (its error line, the CUresult as exit status), and
// checks the class the CLI driver reads from it.
func TestCLIErrorClasses(t *testing.T) {
	f := newCLIFixture(t)
	for _, tc := range []struct {
		name   string
		text   string
		status int
		class  error
	}{
		{"CUDA_ERROR_OUT_OF_MEMORY", "out of memory", 2, ErrOutOfMemory},
		{"CUDA_ERROR_TIMEOUT", "the operation timed out", 141, ErrTimeout},
		{"CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state", 145, ErrIllegalState},
		{"CUDA_ERROR_INVALID_VALUE", "invalid argument", 1, ErrNotCUDA},
		{"CUDA_ERROR_NOT_INITIALIZED", "initialization error", 3, ErrNotCUDA},
		{"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", 100, ErrNotCUDA},
		{"CUDA_ERROR_NOT_SUPPORTED", "operation not supported", 33, ErrNotCheckpointable},
		{"CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS", 48, ErrFailed},
		{"CUDA_ERROR_NOT_PERMITTED", "operation not permitted", 32, ErrFailed},
		{"CUDA_ERROR_NOT_READY", "device not ready", 88, ErrFailed},
		{"CUDA_ERROR_UNKNOWN", "unknown error", 231, ErrFailed},
		{"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure", 207, ErrFailed},
	} {
		writeFaults(t, f.dir, checkpointtest.Faults{"get-state": {Error: tc.name}})
		_, err := f.cli.State(context.Background(), f.pid)
		checkOpErr(t, err, tc.class, "get-state")
		var e *OpError
		errors.As(err, &e)
		name := tc.name
		if tc.name == "CUDA_ERROR_LAUNCH_FAILED" {
			name = "exit status 207" // a CUresult the driver does not expect: the status alone
		} else {
			name += ", exit status " + strconv.Itoa(tc.status)
		}
		want := fmt.Sprintf(`Error getting process state for process ID %d: "%s" (%s)`, f.pid, tc.text, name)
		if e.Detail != want {
			t.Errorf("%s: Detail %s, want %s", tc.name, e.Detail, want)
		}
	}
}

// TestCLIHungToolKilled checks that a deadline kills the tool promptly and
// leaves no process behind.
func TestCLIHungToolKilled(t *testing.T) {
	f := newCLIFixture(t)
	f.do(t, "lock")
	writeFaults(t, f.dir, checkpointtest.Faults{"checkpoint": {DelayMS: 60000}})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := f.cli.Checkpoint(ctx, f.pid)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Checkpoint took %v with a 100ms deadline", took)
	}
	checkOpErr(t, err, ErrTimeout, "checkpoint")
	if left := fakeProcs(t, f.cli.Path()); len(left) > 0 {
		t.Errorf("fake cuda-checkpoint still running: pids %v", left)
	}
	checkState(t, f.cli, f.pid, StateLocked)

	// A cancelled context is a failure that says so.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	err = f.cli.Checkpoint(ctx, f.pid)
	checkOpErr(t, err, ErrFailed, "checkpoint")
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not match context.Canceled", err)
	}
}

func TestCLIHelpProbe(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults checkpointtest.Faults
		caps   Caps
		err    string
	}{
		{"driver 580", nil, Caps{Kind: "cli", Version: "580.65.06", DeviceMap: true, RestoreTID: true}, ""},
		{"driver 570", checkpointtest.Faults{"help": {NoDeviceMap: true}},
			Caps{Kind: "cli", Version: "570.86.10", RestoreTID: true, Warning: r570Warning}, ""},
		{"driver 550", checkpointtest.Faults{"help": {NoAction: true}}, Caps{}, "has no --action (driver 555 or newer needed)"},
		{"help fails", checkpointtest.Faults{"help": {Error: "CUDA_ERROR_UNKNOWN"}}, Caps{}, "--help failed"},
		{"no libcuda", checkpointtest.Faults{"loader": {NeedsLibcuda: true}}, Caps{},
			"cannot load the NVIDIA driver library libcuda.so.1 (set LD_LIBRARY_PATH"},
		{"driver older than 550", checkpointtest.Faults{"loader": {CUDAVersion: 12030}}, Caps{}, "driver 550, CUDA 12.4, or newer needed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LD_LIBRARY_PATH", "")
			dir := t.TempDir()
			link, err := checkpointtest.Install(dir, testutil.Build(t).FakeCudaCheckpoint, tc.faults)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := NewCLI(context.Background(), CLIOptions{Path: link})
			if tc.err != "" {
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), link) {
					t.Fatalf("NewCLI: %v, want ErrUnsupported naming %s and saying %q", err, link, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cli.Caps() != tc.caps {
				t.Errorf("Caps = %+v, want %+v", cli.Caps(), tc.caps)
			}
		})
	}
}

// TestCLILibraryPath checks that the tool gets the daemon's LD_LIBRARY_PATH:
// it is linked against libcuda.so.1, which it may find only there.
func TestCLILibraryPath(t *testing.T) {
	reg := newSimGPUs(t, 1, 4096)
	pid := startSimJob(t, reg, 0, 1000)
	dir, libs := t.TempDir(), t.TempDir()
	link, err := checkpointtest.Install(dir, testutil.Build(t).FakeCudaCheckpoint, checkpointtest.Faults{"loader": {NeedsLibcuda: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(libs, "libcuda.so.1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LD_LIBRARY_PATH", "/nonexistent:"+libs)
	cli, err := NewCLI(context.Background(), CLIOptions{Path: link})
	if err != nil {
		t.Fatalf("NewCLI with libcuda.so.1 on LD_LIBRARY_PATH: %v", err)
	}
	checkState(t, cli, pid, StateRunning)

	// The path is read once, when the driver opens.
	t.Setenv("LD_LIBRARY_PATH", "")
	checkState(t, cli, pid, StateRunning)
	if err := os.Remove(filepath.Join(libs, "libcuda.so.1")); err != nil {
		t.Fatal(err)
	}
	_, err = cli.State(context.Background(), pid)
	checkOpErr(t, err, ErrUnsupported, "get-state")
	if !strings.Contains(err.Error(), "error while loading shared libraries: libcuda.so.1") {
		t.Errorf("error %q does not quote the loader", err)
	}
}

func TestCLIRestoreWithoutDeviceMap(t *testing.T) {
	reg := newSimGPUs(t, 2, 4096)
	cli := newFakeCLI(t, t.TempDir(), checkpointtest.Faults{"help": {NoDeviceMap: true}})
	pid := startSimJob(t, reg, 0, 1000)
	ctx := context.Background()
	if err := cli.Lock(ctx, pid, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.Checkpoint(ctx, pid); err != nil {
		t.Fatal(err)
	}
	err := cli.Restore(ctx, pid, []GPUPair{{Old: "GPU-a", New: "GPU-b"}})
	checkOpErr(t, err, ErrUnsupported, "restore")
	checkState(t, cli, pid, StateCheckpointed)
	if err := cli.Restore(ctx, pid, nil); err != nil {
		t.Fatalf("restore without pairs: %v", err)
	}
	checkState(t, cli, pid, StateLocked)
}

func TestCLIMissingBinary(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "cuda-checkpoint")
	_, err := NewCLI(context.Background(), CLIOptions{Path: missing})
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "--cuda-checkpoint") {
		t.Errorf("NewCLI(%s): %v, want ErrUnsupported naming the path and --cuda-checkpoint", missing, err)
	}

	t.Setenv("PATH", t.TempDir())
	_, err = NewCLI(context.Background(), CLIOptions{})
	if !errors.Is(err, ErrUnsupported) || !errors.Is(err, execx.ErrNotFound) || !strings.Contains(err.Error(), "--cuda-checkpoint") {
		t.Errorf("NewCLI without cuda-checkpoint on PATH: %v", err)
	}

	// Found on PATH, in a per-test directory.
	dir := t.TempDir()
	link, err := checkpointtest.Install(dir, testutil.Build(t).FakeCudaCheckpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	cli, err := NewCLI(context.Background(), CLIOptions{})
	if err != nil || cli.Path() != link {
		t.Fatalf("NewCLI from PATH = %v, %v; want the fake at %s", cli, err, link)
	}
}

// TestFakeGrammar runs the fake directly: its usage errors and the
// commands the driver does not use.
func TestFakeGrammar(t *testing.T) {
	f := newCLIFixture(t)
	pid := strconv.Itoa(f.pid)
	run := func(args ...string) (string, error) {
		res, err := execx.Run(context.Background(), execx.Cmd{Path: f.cli.Path(), Args: args})
		return string(res.Stdout), err
	}
	for _, args := range [][]string{
		{},
		{"--pid", pid},
		{"--get-state"},
		{"--get-state", "--toggle", "--pid", pid},
		{"--action", "freeze", "--pid", pid},
		{"--action", "lock", "--pid", "x"},
		{"--action", "lock", "--pid", pid, "--device-map", "a=b"},
		{"--action", "restore", "--pid", pid, "--device-map", "a"},
		{"--bogus"},
	} {
		_, err := run(args...)
		var ee *execx.ExitError
		if !errors.As(err, &ee) || ee.Status != 2 || !strings.Contains(ee.Stderr, "usage:") {
			t.Errorf("fake %q: %v, want exit 2 with a usage line", args, err)
		}
	}

	if out, err := run("--get-restore-tid", "--pid="+pid); err != nil {
		t.Errorf("--get-restore-tid = %q, %v", out, err)
	} else {
		tid, _ := strconv.Atoi(strings.TrimSpace(out))
		checkRestoreThread(t, f.pid, tid)
	}
	for _, want := range []State{StateCheckpointed, StateRunning} {
		if out, err := run("--toggle", "--pid", pid); err != nil || out != "" {
			t.Fatalf("--toggle = %q, %v", out, err)
		}
		checkState(t, f.cli, f.pid, want)
	}
	if out, err := run("--help"); err != nil || !strings.Contains(out, "--get-state --pid") {
		t.Errorf("--help = %q, %v", out, err)
	}

	for _, tc := range []struct {
		help checkpointtest.Fault
		want []string
	}{
		{checkpointtest.Fault{}, []string{"Version 580.65.06.", "[--device-map <uuids>]", "--device-map|-d <deviceUuids>"}},
		{checkpointtest.Fault{NoDeviceMap: true}, []string{"Version 570.86.10.", "--action lock | checkpoint | restore | unlock --pid <pid> [--timeout <ms>]\n"}},
		{checkpointtest.Fault{NoAction: true}, []string{"Version 550.54.09.", "--toggle --pid <value>"}},
	} {
		writeFaults(t, f.dir, checkpointtest.Faults{"help": tc.help})
		out, err := run("-h")
		for _, w := range tc.want {
			if err != nil || !strings.Contains(out, w) {
				t.Errorf("help %+v: -h = %q, %v; want it to contain %q", tc.help, out, err, w)
			}
		}
	}
	writeFaults(t, f.dir, nil)

	// A failure is the real tool's one line, and its status the CUresult's
	// low 8 bits: a target without the sim directory in its environment
	// (this test), a lock timing out.
	me := strconv.Itoa(os.Getpid())
	_, err := run("--get-state", "-p", me)
	var ee *execx.ExitError
	if !errors.As(err, &ee) || ee.Status != 1 || ee.Stderr != `Error getting process state for process ID `+me+`: "invalid argument"` {
		t.Errorf("get-state of a non-CUDA process: %v", err)
	}
	writeFaults(t, f.dir, checkpointtest.Faults{"lock": {DelayMS: 60000}})
	_, err = run("--action", "lock", "-p", pid, "-t", "10")
	if !errors.As(err, &ee) || ee.Status != 909&0xff || ee.Stderr != `Could not lock on process ID `+pid+`: "the operation timed out"` {
		t.Errorf("lock timing out: %v", err)
	}
	writeFaults(t, f.dir, checkpointtest.Faults{"lock": {Error: "CUDA_ERROR_NO_SUCH_THING"}})
	_, err = run("--action", "lock", "-p", pid)
	if !errors.As(err, &ee) || ee.Status != 2 || !strings.Contains(ee.Stderr, `unknown error "CUDA_ERROR_NO_SUCH_THING"`) {
		t.Errorf("a fault naming an unknown error: %v", err)
	}
}

// TestToolFailure classifies the real tool's output, as NVIDIA's driver
// prints it, with the exit status its CUresult gives.
func TestToolFailure(t *testing.T) {
	for _, tc := range []struct {
		op     string
		output string
		status int
		pairs  bool
		class  error
		what   string
	}{
		{"restore", `Could not restore on process ID 1100100: "invalid argument"`, 1, true, ErrRejected, "CUDA_ERROR_INVALID_VALUE, exit status 1"},
		{"restore", `Could not restore on process ID 3406143: "invalid argument"`, 1, false, ErrNotCUDA, "CUDA_ERROR_INVALID_VALUE, exit status 1"},
		{"restore", `Could not restore on process ID 5: "out of memory"`, 2, false, ErrOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY, exit status 2"},
		{"restore", `Could not restore on process ID 5: "OS call failed or operation not supported on this OS"`, 48, false,
			ErrFailed, "CUDA_ERROR_OPERATING_SYSTEM, exit status 48"},
		{"lock", `Could not lock on process ID 5: "OS call failed or operation not supported on this OS"`, 48, false,
			ErrFailed, "CUDA_ERROR_OPERATING_SYSTEM, exit status 48"},
		{"lock", `Could not lock on process ID 5: "the operation timed out"`, 141, false, ErrTimeout, "CUDA_ERROR_TIMEOUT, exit status 141"},
		{"lock", `Could not lock on process ID 5: "device not ready"`, 88, false, ErrTimeout, "CUDA_ERROR_NOT_READY, exit status 88"},
		{"checkpoint", `Could not checkpoint on process ID 5: "device not ready"`, 88, false, ErrFailed, "CUDA_ERROR_NOT_READY, exit status 88"},
		{"unlock", `Could not unlock on process ID 5: "the operation cannot be performed in the present state"`, 145, false,
			ErrIllegalState, "CUDA_ERROR_ILLEGAL_STATE, exit status 145"},
		{"toggle", `Error toggling CUDA in process ID 98145: "operation not permitted"`, 32, false, ErrFailed, "CUDA_ERROR_NOT_PERMITTED, exit status 32"},
		{"toggle", `Error toggling CUDA in process ID 118146: "operation not supported"`, 33, false,
			ErrNotCheckpointable, "CUDA_ERROR_NOT_SUPPORTED, exit status 33"},
		{"get-state", `Error getting process state for process ID 7: "initialization error"`, 3, false, ErrNotCUDA, "CUDA_ERROR_NOT_INITIALIZED, exit status 3"},
		{"get-restore-tid", `Error initializing CUDA: "OS call failed or operation not supported on this OS"`, 48, false,
			ErrFailed, "CUDA_ERROR_OPERATING_SYSTEM, exit status 48"},
		// A text of a newer driver: the status, 909's low 8 bits, decides.
		{"lock", `Could not lock on process ID 5: "lock wait expired"`, 141, false, ErrTimeout, "CUDA_ERROR_TIMEOUT, exit status 141"},
		{"lock", `Could not lock on process ID 5: "something new"`, 77, false, ErrFailed, "exit status 77"},
		// Output not of the tool's shape says nothing, whatever the status.
		{"lock", `cuda-checkpoint: unknown argument "--bogus"`, 2, false, ErrFailed, "exit status 2"},
		{"lock", "", 2, false, ErrFailed, "exit status 2"},
		// The tool could not run.
		{"lock", "/usr/bin/cuda-checkpoint: error while loading shared libraries: libcuda.so.1: cannot open shared object file: No such file or directory",
			127, false, ErrUnsupported, "it cannot load the NVIDIA driver library libcuda.so.1 (set LD_LIBRARY_PATH in gpuschedd's environment to the library's directory)"},
		{"lock", "Insufficient driver\n", 255, false, ErrUnsupported, "the NVIDIA driver is too old for it (driver 550, CUDA 12.4, or newer needed)"},
	} {
		class, what := toolFailure(tc.op, tc.output, tc.status, tc.pairs)
		if class != tc.class || what != tc.what {
			t.Errorf("%s %q, status %d: %v (%s), want %v (%s)", tc.op, tc.output, tc.status, class, what, tc.class, tc.what)
		}
	}
	if got := helpVersion("CUDA checkpoint utility\nVersion 575.51.03. Copyright"); got != "575.51.03" {
		t.Errorf("helpVersion = %q", got)
	}
}
