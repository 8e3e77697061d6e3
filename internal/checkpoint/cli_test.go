package checkpoint

import (
	"context"
	"errors"
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
	if !strings.Contains(err.Error(), "CUDA_ERROR_TIMEOUT") {
		t.Errorf("error %q does not quote the tool", err)
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
			if !strings.Contains(err.Error(), "injected fault") {
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

func TestCLIErrorClasses(t *testing.T) {
	f := newCLIFixture(t)
	for name, class := range map[string]error{
		"CUDA_ERROR_OUT_OF_MEMORY":   ErrOutOfMemory,
		"CUDA_ERROR_TIMEOUT":         ErrTimeout,
		"CUDA_ERROR_ILLEGAL_STATE":   ErrIllegalState,
		"CUDA_ERROR_INVALID_VALUE":   ErrNotCUDA,
		"CUDA_ERROR_NOT_INITIALIZED": ErrNotCUDA,
		"CUDA_ERROR_NO_DEVICE":       ErrNotCUDA,
		"CUDA_ERROR_NOT_SUPPORTED":   ErrNotCheckpointable,
		"CUDA_ERROR_UNKNOWN":         ErrFailed,
		"CUDA_ERROR_LAUNCH_FAILED":   ErrFailed,
	} {
		writeFaults(t, f.dir, checkpointtest.Faults{"get-state": {Error: name}})
		_, err := f.cli.State(context.Background(), f.pid)
		checkOpErr(t, err, class, "get-state")
		var e *OpError
		errors.As(err, &e)
		want := strconv.Quote("cuda-checkpoint: get-state pid " + strconv.Itoa(f.pid) + ": " + name + ": injected fault")
		if e.Detail != want {
			t.Errorf("%s: Detail %s, want %s", name, e.Detail, want)
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
		name string
		help checkpointtest.Fault
		caps Caps
		err  string
	}{
		{"full", checkpointtest.Fault{}, Caps{Kind: "cli", Version: "570.0.0", DeviceMap: true, RestoreTID: true}, ""},
		{"no device map", checkpointtest.Fault{NoDeviceMap: true}, Caps{Kind: "cli", Version: "570.0.0", RestoreTID: true}, ""},
		{"no action", checkpointtest.Fault{NoAction: true}, Caps{}, "has no --action (driver 570 or newer needed)"},
		{"help fails", checkpointtest.Fault{Error: "CUDA_ERROR_UNKNOWN"}, Caps{}, "--help failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			link, err := checkpointtest.Install(dir, testutil.Build(t).FakeCudaCheckpoint, checkpointtest.Faults{"help": tc.help})
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

	// A target without the sim directory in its environment (this test).
	_, err := run("--get-state", "--pid", strconv.Itoa(os.Getpid()))
	var ee *execx.ExitError
	if !errors.As(err, &ee) || ee.Status != 1 || !strings.Contains(ee.Stderr, "CUDA_ERROR_INVALID_VALUE") {
		t.Errorf("get-state of a non-CUDA process: %v", err)
	}
}

func TestClassify(t *testing.T) {
	for stderr, want := range map[string]error{
		"":                                   ErrFailed,
		"cuda-checkpoint: weird":             ErrFailed,
		"x: CUDA_ERROR_OUT_OF_MEMORY: y":     ErrOutOfMemory,
		"Could not lock: CUDA_ERROR_TIMEOUT": ErrTimeout,
	} {
		if got := classify(stderr); got != want {
			t.Errorf("classify(%q) = %v, want %v", stderr, got, want)
		}
	}
	if got := helpVersion("CUDA checkpoint utility\nVersion 575.51.03. Copyright"); got != "575.51.03" {
		t.Errorf("helpVersion = %q", got)
	}
}
