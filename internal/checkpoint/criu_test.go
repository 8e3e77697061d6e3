package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
	"github.com/gpusched/gpusched/internal/testutil"
)

// nsJob is a simulated job with patterned host memory, started as the init
// of its own PID and mount namespaces and session, with a /proc of its own
// (as the daemon starts its trees).
type nsJob struct {
	cmd *exec.Cmd
	log string
}

func startNSJob(t *testing.T, dir string, args ...string) *nsJob {
	t.Helper()
	return startNSJobEnv(t, dir, nil, args...)
}

// startNSJobEnv is startNSJob with env added to the job's environment.
func startNSJobEnv(t *testing.T, dir string, env []string, args ...string) *nsJob {
	t.Helper()
	bins := testutil.Build(t)
	log := filepath.Join(dir, "job.log")
	cmd := exec.Command(bins.SimJob, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	testutil.InTree(cmd, log)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return &nsJob{cmd: cmd, log: log}
}

// waitLog polls the log until it contains want, returning the log.
func waitLog(t *testing.T, path, want string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %s never showed %q:\n%s", path, want, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func newTestCRIU(t *testing.T) *CRIU {
	t.Helper()
	c, err := NewCRIU(context.Background(), CRIUOptions{Path: testutil.CRIU(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func imagesDir(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "img")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCRIUDumpRestoreKeepsMemoryAndCounter dumps a tree that CRIU kills
// (LeaveDead), or leaves stopped for the caller to kill (LeaveStopped),
// and restores it with its memory intact.
func TestCRIUDumpRestoreKeepsMemoryAndCounter(t *testing.T) {
	for name, leave := range map[string]Leave{"dead": LeaveDead, "stopped": LeaveStopped} {
		t.Run(name, func(t *testing.T) { dumpRestoreKeepsMemory(t, leave) })
	}
}

func dumpRestoreKeepsMemory(t *testing.T, leave Leave) {
	c := newTestCRIU(t)
	if !strings.HasPrefix(c.Version(), "4.") {
		t.Fatalf("version %q", c.Version())
	}
	job := startNSJob(t, t.TempDir(), "--host-mem", "32", "--tick", "0.01")
	waitLog(t, job.log, "tick 3\n")
	dir := imagesDir(t)
	if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: job.cmd.Process.Pid, Leave: leave}); err != nil {
		t.Fatal(err)
	}
	if leave == LeaveStopped {
		// Answered with the tree alive and stopped: the caller ends it.
		if st, err := procfs.ReadStat(job.cmd.Process.Pid); err != nil || st.State != 'T' {
			t.Fatalf("dumped tree: state %q, %v; want it stopped (T)", st.State, err)
		}
		if err := job.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	_ = job.cmd.Wait() // reap the dumped tree so its pid is free
	before, _ := os.ReadFile(job.log)
	last := strings.Count(string(before), "tick ")

	pid, err := c.Restore(context.Background(), RestoreOpts{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL); _, _ = unix.Wait4(pid, nil, 0, nil) })
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err != nil || !strings.Contains(string(st), "PPid:\t"+fmt.Sprint(os.Getpid())) {
		t.Fatalf("restored pid %d is not our child: %v\n%s", pid, err, st)
	}
	// The counter goes on from where it stopped, and the memory is intact.
	waitLog(t, job.log, fmt.Sprintf("tick %d\n", last+2))
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	out := waitLog(t, job.log, "host memory verified")
	if strings.Count(out, "tick 1\n") != 1 {
		t.Fatalf("the counter restarted:\n%s", out)
	}
}

func TestCRIULeaveRunningAndTwoCopies(t *testing.T) {
	c := newTestCRIU(t)
	job := startNSJob(t, t.TempDir(), "--host-mem", "8", "--tick", "0.01")
	waitLog(t, job.log, "tick 2\n")
	dir := imagesDir(t)
	if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: job.cmd.Process.Pid, Leave: LeaveRunning}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(job.cmd.Process.Pid, 0); err != nil {
		t.Fatalf("source gone after a leave-running dump: %v", err)
	}
	for range 2 {
		pid, err := c.Restore(context.Background(), RestoreOpts{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL); _, _ = unix.Wait4(pid, nil, 0, nil) })
	}
}

// TestCRIURestoredErrorFailsRestore: an error from the Restored hook fails
// the restore and leaves no restored process, not even a zombie.
func TestCRIURestoredErrorFailsRestore(t *testing.T) {
	c := newTestCRIU(t)
	job := startNSJob(t, t.TempDir(), "--tick", "0.01")
	waitLog(t, job.log, "tick 2\n")
	dir := imagesDir(t)
	if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: job.cmd.Process.Pid}); err != nil {
		t.Fatal(err)
	}
	_ = job.cmd.Wait()
	restored := 0
	_, err := c.Restore(context.Background(), RestoreOpts{Dir: dir, Restored: func(pid int) error {
		restored = pid
		return errors.New("no room for it")
	}})
	if !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no room for it") {
		t.Fatalf("err = %v, want ErrFailed with the hook's error", err)
	}
	if restored <= 0 {
		t.Fatal("the hook was not called")
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", restored)); err == nil {
		t.Fatalf("restored pid %d is still there", restored)
	}
}

func TestCRIURestoreFailureQuotesLog(t *testing.T) {
	c := newTestCRIU(t)
	_, err := c.Restore(context.Background(), RestoreOpts{Dir: imagesDir(t)})
	var ce *CRIUError
	if !errors.As(err, &ce) || !errors.Is(err, ErrFailed) {
		t.Fatalf("err = %v, want a CRIUError of class ErrFailed", err)
	}
	if len(ce.Lines) == 0 || !strings.Contains(err.Error(), "Error (") {
		t.Fatalf("no CRIU log line quoted: %v", err)
	}
}

func TestCRIUDeadlineKillsWorker(t *testing.T) {
	c := newTestCRIU(t)
	job := startNSJob(t, t.TempDir(), "--host-mem", "256", "--tick", "0.01")
	waitLog(t, job.log, "host memory 256 MiB filled")
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	err := c.Dump(ctx, DumpOpts{Dir: imagesDir(t), PID: job.cmd.Process.Pid})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if left := criuChildren(t); len(left) > 0 {
		t.Fatalf("criu workers left: %v", left)
	}
}

func TestNewCRIURefusesMissingBinary(t *testing.T) {
	_, err := NewCRIU(context.Background(), CRIUOptions{Path: "/nonexistent/criu"})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
}

func TestLogErrorsSkipsHarmlessLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "restore.log")
	log := "(00.001) Warn (x): w\n(00.002) Error (criu/cr-restore.c:1): Can't setup RLIMIT_NOFILE\n(00.003) Error (criu/files.c:9): Can't open file\n"
	if err := os.WriteFile(p, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got := LogErrors(p, 5)
	if len(got) != 1 || got[0] != "Error (criu/files.c:9): Can't open file" {
		t.Fatalf("got %q", got)
	}
}

// criuChildren lists this process's children that are CRIU workers.
func criuChildren(t *testing.T) []int {
	t.Helper()
	var out []int
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		b, _ := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "children"))
		for _, f := range strings.Fields(string(b)) {
			if cmd, _ := os.ReadFile("/proc/" + f + "/cmdline"); strings.Contains(string(cmd), "\x00swrk\x00") {
				pid, _ := strconv.Atoi(f)
				out = append(out, pid)
			}
		}
	}
	return out
}

// cudaNSJob is a CUDA job (simulated GPUs, the fake cuda-checkpoint) in
// its own PID namespace, checkpointed as the daemon checkpoints a process
// before CRIU dumps it.
type cudaNSJob struct {
	*nsJob
	reg   *simgpu.Registry
	drv   *CLI
	ccDir string // the fake cuda-checkpoint's directory
	state []byte // its simulated CUDA state, which a restore carries in
}

func startCUDANSJob(t *testing.T) *cudaNSJob {
	t.Helper()
	j := &cudaNSJob{reg: newSimGPUs(t, 2, 4096), ccDir: t.TempDir()}
	j.drv = newFakeCLI(t, j.ccDir, nil)
	j.nsJob = startNSJobEnv(t, t.TempDir(), []string{simgpu.EnvDir + "=" + j.reg.Dir(), "CUDA_VISIBLE_DEVICES=0"},
		"--vram", "512", "--host-mem", "16", "--tick", "0.01")
	waitLog(t, j.log, "tick 2\n")
	ctx, pid := context.Background(), j.cmd.Process.Pid
	if err := j.drv.Lock(ctx, pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := j.drv.Checkpoint(ctx, pid); err != nil {
		t.Fatal(err)
	}
	// A simulated process's CUDA state lives beside it: it goes with the
	// image, and is back by the time CRIU's plugins would act (Restored).
	var err error
	if j.state, err = j.reg.ExportProcess(pid); err != nil {
		t.Fatal(err)
	}
	return j
}

// plugin is the stand-in for CRIU's CUDA plugin, running the job's fake
// cuda-checkpoint, in a plugin directory of its own.
func (j *cudaNSJob) plugin(t *testing.T) string {
	return testutil.CRIUCUDAPlugin(t, filepath.Join(j.ccDir, "cuda-checkpoint"))
}

// restore restores the job's image in dir, carrying its CUDA state in,
// and checks that it comes back checkpointed, restores onto GPU 1 and
// keeps its memory.
func (j *cudaNSJob) restore(t *testing.T, c *CRIU, dir string) {
	t.Helper()
	ctx := context.Background()
	pid, err := c.Restore(ctx, RestoreOpts{Dir: dir, Restored: func(pid int) error {
		start, err := procfs.StartTime(pid)
		if err != nil {
			return err
		}
		return j.reg.ImportProcess(pid, start, j.state)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL); _, _ = unix.Wait4(pid, nil, 0, nil) })
	checkState(t, j.drv, pid, StateCheckpointed)
	if err := j.drv.Restore(ctx, pid, []GPUPair{{Old: simgpu.DeviceUUID(0), New: simgpu.DeviceUUID(1)}}); err != nil {
		t.Fatal(err)
	}
	if err := j.drv.Unlock(ctx, pid); err != nil {
		t.Fatal(err)
	}
	if u0, u1 := gpuUsed(t, j.reg, 0), gpuUsed(t, j.reg, 1); u0 != 0 || u1 != 512 {
		t.Fatalf("GPU use after the restore onto GPU 1: %d, %d MiB; want 0, 512", u0, u1)
	}
	if err := unix.Kill(pid, unix.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitLog(t, j.log, "host memory verified")
}

// TestCRIURestoreLeavesCUDAState dumps and restores a CUDA job the way the
// daemon does (checkpointed first, then dumped; restored, then restored
// onto another GPU), with and without CRIU's CUDA plugin installed where
// CRIU loads plugins from ($CRIU_LIBS_DIR). The plugin would restore and
// unlock the job during the CRIU restore, on the GPU it was dumped on; CRIU
// must load no plugin, so the job comes back checkpointed either way.
func TestCRIURestoreLeavesCUDAState(t *testing.T) {
	for _, plugin := range []bool{false, true} {
		t.Run(fmt.Sprintf("plugin=%v", plugin), func(t *testing.T) {
			c := newTestCRIU(t)
			j := startCUDANSJob(t)
			if plugin {
				t.Setenv("CRIU_LIBS_DIR", j.plugin(t))
			}
			dir := imagesDir(t)
			if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: j.cmd.Process.Pid}); err != nil {
				t.Fatal(err)
			}
			_ = j.cmd.Wait()
			j.restore(t, c, dir)
		})
	}
}

// TestCRIURestoresImageOfCUDAPlugin restores an image that CRIU dumped
// with its CUDA plugin loaded (as CRIU run with its defaults does where the
// plugin is installed, and as gpusched did before it ran CRIU without
// plugins): the dump records the plugin as one the restore needs, and CRIU
// refuses to restore such an image without it.
func TestCRIURestoresImageOfCUDAPlugin(t *testing.T) {
	c := newTestCRIU(t)
	j := startCUDANSJob(t)
	dir := imagesDir(t)
	out, err := exec.Command(c.Path(), "dump", "--libdir", j.plugin(t), "--tree", strconv.Itoa(j.cmd.Process.Pid),
		"--images-dir", dir, "--manage-cgroups=ignore", "--file-locks", "--log-file", DumpLog, "-v2").CombinedOutput()
	if err != nil {
		t.Fatalf("criu dump: %v\n%s\n%q", err, out, LogErrors(filepath.Join(dir, DumpLog), 5))
	}
	_ = j.cmd.Wait()
	j.restore(t, c, dir)
}

// TestCRIUWorkerRunsInCgroup: given a cgroup, a dump's and a restore's
// worker are moved into it (their CPU counted there), and the restored
// tree is born there; this process stays where it was.
func TestCRIUWorkerRunsInCgroup(t *testing.T) {
	mnt, top := testutil.CgroupTop(t)
	dir := filepath.Join(top, "criu")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ours := testutil.CgroupOf(t, os.Getpid())
	c := newTestCRIU(t)
	job := startNSJob(t, t.TempDir(), "--host-mem", "8", "--tick", "0.01")
	waitLog(t, job.log, "tick 2\n")
	images := imagesDir(t)
	if err := c.Dump(context.Background(), DumpOpts{Dir: images, PID: job.cmd.Process.Pid, Cgroups: []string{dir}}); err != nil {
		t.Fatal(err)
	}
	_ = job.cmd.Wait()
	dumped := testutil.CgroupCPU(t, dir)
	if dumped == 0 {
		t.Fatalf("the dump's worker spent no CPU in cgroup %s", dir)
	}
	pid, err := c.Restore(context.Background(), RestoreOpts{Dir: images, Cgroups: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL); _, _ = unix.Wait4(pid, nil, 0, nil) })
	if got, want := testutil.CgroupOf(t, pid), strings.TrimPrefix(dir, mnt); got != want {
		t.Errorf("the restored tree is in cgroup %s, want %s", got, want)
	}
	if testutil.CgroupCPU(t, dir) <= dumped {
		t.Errorf("the restore's worker spent no CPU in cgroup %s", dir)
	}
	if got := testutil.CgroupOf(t, os.Getpid()); got != ours {
		t.Errorf("this process moved from cgroup %s to %s", ours, got)
	}
}

// TestCRIUDumpWorkerOnTreeCPUs: an owner's dump runs its worker on the
// tree's own CPUs (DumpOpts.CPUs). The worker is caught alive as CRIU
// waits for the page server's answer to its first request (PS_IOV_OPEN2,
// open_page_server_xfer in criu/page-xfer.c), which never comes.
func TestCRIUDumpWorkerOnTreeCPUs(t *testing.T) {
	_, tree := testutil.CPUsApart(t)
	c := newTestCRIU(t)
	job := startNSJob(t, t.TempDir(), "--host-mem", "8", "--tick", "0.01")
	waitLog(t, job.log, "tick 2\n")
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours := os.NewFile(uintptr(fds[0]), "page-server")
	defer ours.Close()
	dumped := make(chan error, 1)
	go func() {
		dumped <- c.Dump(context.Background(), DumpOpts{Dir: imagesDir(t), PID: job.cmd.Process.Pid, Leave: LeaveRunning,
			PageServer: os.NewFile(uintptr(fds[1]), "criu-page-server"), CPUs: tree})
	}()
	if _, err := ours.Read(make([]byte, 1)); err != nil {
		t.Fatalf("no request from the dump's worker: %v (the dump: %v)", err, <-dumped)
	}
	worker := swrkChild(t)
	testutil.WantThreadsOn(t, "the dump's worker", worker, tree)
	ours.Close()
	if err := <-dumped; err == nil {
		t.Error("a dump whose page server hung up succeeded")
	}
}

// swrkChild is the one child of this process that is a CRIU worker
// (its command line names swrk: CRIU may be run through its dynamic
// loader, whose name the process then has).
func swrkChild(t *testing.T) int {
	t.Helper()
	found := pidsWhere(t, func(pid int, argv []string) bool {
		st, err := procfs.ReadStat(pid)
		return err == nil && st.PPID == os.Getpid() && slices.Contains(argv, "swrk")
	})
	if len(found) != 1 {
		t.Fatalf("CRIU workers among this process's children: %v, want one", found)
	}
	return found[0]
}
