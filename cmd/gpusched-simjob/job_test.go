package main

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
)

// simjobBin is the program under test, built once by TestMain.
var simjobBin string

func TestMain(m *testing.M) {
	testutil.TreeInit()
	dir, err := os.MkdirTemp("", "simjob-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	simjobBin = filepath.Join(dir, "gpusched-simjob")
	build := exec.Command("go", "build", "-o", simjobBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building gpusched-simjob:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	testutil.Cleanup()
	os.Exit(code)
}

// lineTimeout only bounds a test that would otherwise hang; every wait is on
// an event.
const lineTimeout = 30 * time.Second

// newSim creates a sim directory with count GPUs of size MiB.
func newSim(t *testing.T, count int, size uint64) *simgpu.Registry {
	t.Helper()
	reg, err := simgpu.Create(t.TempDir(), simgpu.Devices(count, size))
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// simjob is a running gpusched-simjob.
type simjob struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
	waited bool
}

// startJob runs the program with the sim directory of reg (if any), the
// given CUDA_VISIBLE_DEVICES (if not empty) and args.
func startJob(t *testing.T, reg *simgpu.Registry, visible string, args ...string) *simjob {
	t.Helper()
	j := newJob(reg, visible, args...)
	if err := j.start(t); err != nil {
		t.Fatal(err)
	}
	return j
}

// newJob prepares a job for start.
func newJob(reg *simgpu.Registry, visible string, args ...string) *simjob {
	j := &simjob{cmd: exec.Command(simjobBin, args...), lines: make(chan string, 100)}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, simgpu.EnvDir+"=") && !strings.HasPrefix(kv, envVisible+"=") {
			env = append(env, kv)
		}
	}
	if reg != nil {
		env = append(env, simgpu.EnvDir+"="+reg.Dir())
	}
	if visible != "" {
		env = append(env, envVisible+"="+visible)
	}
	j.cmd.Env = env
	j.cmd.Stderr = &j.stderr
	return j
}

// start starts the job and its stdout reader; a failure to start is returned.
func (j *simjob) start(t *testing.T) error {
	t.Helper()
	stdout, err := j.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.cmd.Start(); err != nil {
		return err
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			j.lines <- sc.Text()
		}
		close(j.lines)
	}()
	t.Cleanup(func() {
		if !j.waited {
			_ = j.cmd.Process.Kill()
			_ = j.cmd.Wait()
		}
	})
	return nil
}

// waitLine returns the next stdout line that starts with prefix.
func (j *simjob) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(lineTimeout)
	for {
		select {
		case line, ok := <-j.lines:
			if !ok {
				_ = j.cmd.Wait() // its stderr is whole, and no longer written, once it exited
				j.waited = true
				t.Fatalf("stdout ended before %q; stderr: %s", prefix, j.stderr.String())
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("no line %q within %v", prefix, lineTimeout)
		}
	}
}

// wait waits for the exit and returns the wait status.
func (j *simjob) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	for range j.lines {
		// Drain stdout so that Wait's copy can finish.
	}
	err := j.cmd.Wait()
	j.waited = true
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatal(err)
	}
	return j.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func (j *simjob) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := j.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

func procUsage(t *testing.T, reg *simgpu.Registry) []simgpu.ProcUsage {
	t.Helper()
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return snap.Procs
}

// assertNoRecords checks that the jobs' user's record directory,
// procs/<uid>/, holds no file at all.
func assertNoRecords(t *testing.T, reg *simgpu.Registry) {
	t.Helper()
	dir := filepath.Join(reg.Dir(), "procs", strconv.Itoa(os.Geteuid()))
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("records left in %s: %v", dir, ents)
	}
}

func TestVRAMRegisteredUntilSIGTERM(t *testing.T) {
	reg := newSim(t, 3, 4096)
	gpu0, gpu2 := simgpu.DeviceUUID(0), simgpu.DeviceUUID(2)
	j := startJob(t, reg, gpu2+",0", "--vram", "1000", "--ramp", "0.05")
	pid := j.cmd.Process.Pid

	want := fmt.Sprintf("simjob: pid=%d gpus=%s,%s vram=1000", pid, gpu2, gpu0)
	if got := j.waitLine(t, "simjob: pid="); got != want {
		t.Errorf("start line %q, want %q", got, want)
	}
	j.waitLine(t, "simjob: allocated 1000 MiB on "+gpu2)
	j.waitLine(t, "simjob: allocated 1000 MiB on "+gpu0)
	wantUsage := fmt.Sprint([]simgpu.ProcUsage{{PID: pid, UUID: gpu0, UsedMiB: 1000}, {PID: pid, UUID: gpu2, UsedMiB: 1000}})
	if got := fmt.Sprint(procUsage(t, reg)); got != wantUsage {
		t.Errorf("registry while running: %s, want %s", got, wantUsage)
	}

	j.signal(t, syscall.SIGTERM)
	if ws := j.wait(t); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("wait status %v, want death by SIGTERM", ws)
	}
	if got := procUsage(t, reg); len(got) != 0 {
		t.Errorf("registry after SIGTERM: %v", got)
	}
	assertNoRecords(t, reg)
}

func TestHoldThenExitCode(t *testing.T) {
	reg := newSim(t, 1, 4096)
	j := startJob(t, reg, "0", "--vram", "512", "--hold", "0.01", "--exit-code", "7")
	j.waitLine(t, "simjob: allocated 512 MiB")
	j.waitLine(t, "simjob: done, exiting with 7")
	if ws := j.wait(t); !ws.Exited() || ws.ExitStatus() != 7 {
		t.Errorf("wait status %v, want exit 7", ws)
	}
	assertNoRecords(t, reg)
}

func TestOOM(t *testing.T) {
	reg := newSim(t, 1, 1024)
	holder := startJob(t, reg, "0", "--vram", "800")
	holder.waitLine(t, "simjob: allocated 800 MiB")

	j := startJob(t, reg, simgpu.DeviceUUID(0), "--vram", "500")
	if ws := j.wait(t); !ws.Exited() || ws.ExitStatus() != 1 {
		t.Errorf("wait status %v, want exit 1", ws)
	}
	want := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500 MiB. GPU 0 has a total capacity of 1024 MiB of which 224 MiB is free."
	if !strings.Contains(j.stderr.String(), want) {
		t.Errorf("stderr %q lacks %q", j.stderr.String(), want)
	}
	usage := procUsage(t, reg)
	if len(usage) != 1 || usage[0].PID != holder.cmd.Process.Pid {
		t.Errorf("registry after the OOM: %v, want only the holder", usage)
	}

	holder.signal(t, syscall.SIGINT)
	if ws := holder.wait(t); !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("holder wait status %v, want death by SIGINT", ws)
	}
	assertNoRecords(t, reg)
}

func TestOOMOnce(t *testing.T) {
	reg := newSim(t, 1, 1024)
	marker := filepath.Join(t.TempDir(), "oom-marker")
	args := []string{"--vram", "100", "--hold", "0.01", "--oom-once", marker}

	first := startJob(t, reg, "0", args...)
	if ws := first.wait(t); ws.ExitStatus() != 1 {
		t.Errorf("first run: wait status %v, want exit 1", ws)
	}
	want := "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 100 MiB. (simulated by gpusched-simjob --oom-once)"
	if !strings.Contains(first.stderr.String(), want) {
		t.Errorf("first run stderr %q lacks %q", first.stderr.String(), want)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("marker not created: %v", err)
	}

	second := startJob(t, reg, "0", args...)
	second.waitLine(t, "simjob: allocated 100 MiB")
	if ws := second.wait(t); ws.ExitStatus() != 0 {
		t.Errorf("second run: wait status %v, want exit 0; stderr %s", ws, second.stderr.String())
	}
}

func TestMissingEnvironment(t *testing.T) {
	reg := newSim(t, 1, 1024)
	for _, tc := range []struct {
		name    string
		reg     *simgpu.Registry
		visible string
		want    string
	}{
		{"no sim dir", nil, "0", simgpu.EnvDir},
		{"no visible GPUs", reg, "", envVisible},
		{"unknown GPU", reg, "GPU-nope", "no such simulated GPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := startJob(t, tc.reg, tc.visible, "--vram", "10")
			if ws := j.wait(t); ws.ExitStatus() != 2 {
				t.Errorf("wait status %v, want exit 2", ws)
			}
			if !strings.Contains(j.stderr.String(), tc.want) {
				t.Errorf("stderr %q lacks %q", j.stderr.String(), tc.want)
			}
		})
	}
}

func TestHostMemRunsClean(t *testing.T) {
	j := startJob(t, nil, "", "--host-mem", "16")
	j.waitLine(t, "simjob: host memory 16 MiB filled")
	j.signal(t, syscall.SIGUSR1)
	j.waitLine(t, "simjob: host memory verified")
	j.signal(t, syscall.SIGTERM)
	if ws := j.wait(t); !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Errorf("wait status %v, want death by SIGTERM; stderr %s", ws, j.stderr.String())
	}
}

func TestTickCounts(t *testing.T) {
	j := startJob(t, nil, "", "--tick", "0.005")
	for n := 1; n <= 3; n++ {
		if got, want := j.waitLine(t, "tick "), fmt.Sprintf("tick %d", n); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	j.signal(t, syscall.SIGTERM)
	j.wait(t)
}

// TestTicksThenExit: --ticks N ends the job after N ticks, releasing its
// memory, with --exit-code.
func TestTicksThenExit(t *testing.T) {
	reg := newSim(t, 1, 4096)
	j := startJob(t, reg, "0", "--vram", "512", "--tick", "0.005", "--ticks", "3", "--exit-code", "4")
	j.waitLine(t, "simjob: 3 ticks done, exiting with 4")
	if ws := j.wait(t); !ws.Exited() || ws.ExitStatus() != 4 {
		t.Errorf("wait status %v, want exit 4", ws)
	}
	assertNoRecords(t, reg)
}

// TestTicksWaitWhileLocked: a process locked for a checkpoint counts no
// ticks towards --ticks, as its GPU work is blocked; it finishes them once
// unlocked.
func TestTicksWaitWhileLocked(t *testing.T) {
	reg := newSim(t, 1, 4096)
	j := startJob(t, reg, "0", "--vram", "512", "--tick", "0.01", "--ticks", "20")
	j.waitLine(t, "simjob: allocated 512 MiB")
	if err := reg.LockProcess(j.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	// 50 tick periods locked: without the lock it would be done.
	deadline := time.After(500 * time.Millisecond)
	for locked := true; locked; {
		select {
		case line := <-j.lines:
			if strings.Contains(line, "ticks done") {
				t.Fatalf("job finished its ticks while locked: %q", line)
			}
		case <-deadline:
			locked = false
		}
	}
	if err := reg.UnlockProcess(j.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	j.waitLine(t, "simjob: 20 ticks done")
	if ws := j.wait(t); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Errorf("wait status %v, want exit 0", ws)
	}
	assertNoRecords(t, reg)
}

// inTree starts j as pid 1 of a tree laid out as gpuschedd's; ownProc
// false keeps the host's /proc, as trees had before they got their own.
func inTree(t *testing.T, j *simjob, ownProc bool) {
	t.Helper()
	if ownProc {
		testutil.InTree(j.cmd, "")
	} else {
		j.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	if err := j.start(t); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skip("creating PID and mount namespaces needs CAP_SYS_ADMIN")
		}
		t.Fatal(err)
	}
}

func TestReportsHostPIDInTree(t *testing.T) {
	reg := newSim(t, 1, 1024)
	j := newJob(reg, "0", "--vram", "100")
	inTree(t, j, true)
	pid := j.cmd.Process.Pid // host pid; the job is pid 1 inside
	j.waitLine(t, fmt.Sprintf("simjob: pid=%d ", pid))
	j.waitLine(t, "simjob: allocated 100 MiB")
	if got := procUsage(t, reg); len(got) != 1 || got[0].PID != pid {
		t.Errorf("registry: %v, want host pid %d", got, pid)
	}
	// As its namespace's init it cannot die from its own signal: it exits
	// with 128+SIGTERM instead, having released its memory.
	j.signal(t, syscall.SIGTERM)
	if ws := j.wait(t); ws.ExitStatus() != 128+int(syscall.SIGTERM) {
		t.Errorf("wait status %v, want exit %d", ws, 128+int(syscall.SIGTERM))
	}
	assertNoRecords(t, reg)
}

// TestCUDAFailsWithHostProc: a CUDA process in a PID namespace of its own
// that kept the host's /proc fails to initialise CUDA, as PyTorch did in
// gpuschedd's trees on an H200 (simgpu.InitCUDA).
func TestCUDAFailsWithHostProc(t *testing.T) {
	reg := newSim(t, 1, 1024)
	j := newJob(reg, "0", "--vram", "100")
	inTree(t, j, false)
	ws := j.wait(t)
	if ws.ExitStatus() == 0 || !strings.Contains(j.stderr.String(), "OS call failed or operation not supported on this OS") {
		t.Fatalf("wait status %v, stderr %q: want CUDA's error 304", ws, j.stderr.String())
	}
	assertNoRecords(t, reg)
}

func TestAllocationWaitsWhileLocked(t *testing.T) {
	const ramp = time.Second
	reg := newSim(t, 1, 4096)
	j := startJob(t, reg, "0", "--vram", "1000", "--ramp", "1")
	pid := j.cmd.Process.Pid
	begin := time.Now()
	j.waitLine(t, "simjob: pid=")

	// Lock as soon as the first step of the ramp is registered.
	var held uint64
	for deadline := time.Now().Add(lineTimeout); held == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the job registered no memory")
		}
		if u := procUsage(t, reg); len(u) == 1 {
			held = u[0].UsedMiB
		}
	}
	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if u := procUsage(t, reg); len(u) != 1 || u[0].UsedMiB == 1000 {
		t.Fatalf("usage at lock %v: the ramp finished before the lock; nothing to test", u)
	}
	held = procUsage(t, reg)[0].UsedMiB

	// Past the end of the ramp the job must still wait, alive.
	select {
	case line := <-j.lines:
		t.Fatalf("job printed %q while locked; stderr %s", line, j.stderr.String())
	case <-time.After(time.Until(begin.Add(ramp + 200*time.Millisecond))):
	}
	if u := procUsage(t, reg); len(u) != 1 || u[0].UsedMiB != held {
		t.Errorf("usage while locked %v, want %d MiB as at the lock", u, held)
	}
	if err := reg.UnlockProcess(pid); err != nil {
		t.Fatal(err)
	}
	j.waitLine(t, "simjob: allocated 1000 MiB")
	j.signal(t, syscall.SIGTERM)
	if ws := j.wait(t); !ws.Signaled() {
		t.Errorf("wait status %v, want death by SIGTERM; stderr %s", ws, j.stderr.String())
	}
	assertNoRecords(t, reg)
}
