package daemon

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/cpuslice"
)

// The built daemon, at its defaults, runs every thread at --cpu-slice's
// default, threads the runtime adds later too, while the trees it starts
// (the supervisor and the user's command) begin at the kernel's default.
func TestDaemonThreadsAtTheSliceTreesAtTheDefault(t *testing.T) {
	def := kernelDefaultSlice(t)
	want := config.Default().CPUSlice
	if want == 0 || want == def {
		t.Fatalf("default --cpu-slice %v: want a slice other than the kernel's %v", want, def)
	}
	h := prepareHarness(t)
	dp := h.startBinary()
	p := h.run("worker", "sleep", "1000")
	t.Cleanup(func() { unix.Kill(p.InitPID, unix.SIGKILL) })

	for _, pid := range []int{p.InitPID, p.PID} {
		if got, err := cpuslice.Of(pid); err != nil || got != def {
			t.Errorf("managed pid %d: slice %v (%v); want the kernel's default %v", pid, got, err, def)
		}
	}
	// Threads the runtime started since Keep's last pass get it at the next
	// (a poll: no event says so).
	daemon, deadline := dp.cmd.Process.Pid, time.Now().Add(30*time.Second)
	for off := threadsOffSlice(t, daemon, want); len(off) > 0; off = threadsOffSlice(t, daemon, want) {
		if time.Now().After(deadline) {
			t.Fatalf("daemon threads %v not at slice %v after 30 s", off, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// kernelDefaultSlice is the slice of a process started afresh; it skips
// where the kernel keeps no per-thread slice.
func kernelDefaultSlice(t *testing.T) time.Duration {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	def, err := cpuslice.Of(cmd.Process.Pid)
	if err != nil || def == 0 {
		t.Skipf("no per-thread slice here (Linux 6.12+): %v", err)
	}
	return def
}

// threadsOffSlice lists pid's threads whose slice is not want.
func threadsOffSlice(t *testing.T, pid int, want time.Duration) []int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	var off []int
	for _, n := range names {
		tid, _ := strconv.Atoi(n)
		if got, err := cpuslice.Of(tid); err == nil && got != want {
			off = append(off, tid)
		}
	}
	return off
}
