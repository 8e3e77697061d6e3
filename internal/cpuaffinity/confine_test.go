package cpuaffinity_test

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/testutil"
)

// TestStartOn: StartOn starts a process on the CPUs the daemon gives
// users and, of those, on its tree's own, every thread of it, and leaves
// this process's threads where they were; Caller keeps of a process's
// CPUs only what narrows those, and refuses one with none of them. First
// unconfined (the daemon's CPUs are the users'), then after Confine, which
// holds every thread of this process, and those started after it, on its
// CPUs. The two run in this order in one test: Confine's effect lasts
// until Unconfine.
func TestStartOn(t *testing.T) {
	first, rest := testutil.CPUsApart(t)
	t.Cleanup(cpuaffinity.Unconfine) // after ConfineSelf's own cleanup
	all := first + "," + rest
	if set, err := cpuaffinity.Parse(all); err == nil {
		all = cpuaffinity.Format(set)
	}
	wantCaller := func(what string, pid int, want string) {
		t.Helper()
		if got, err := cpuaffinity.Caller(pid); err != nil || got != want {
			t.Errorf("Caller(%s) = %q, %v; want %q", what, got, err, want)
		}
	}

	testutil.WantThreadsOn(t, "a child started with no CPUs of its own, unconfined", startThreaded(t, ""), all)
	wantCaller("this process, on every CPU", os.Getpid(), "")
	child := startThreaded(t, rest)
	testutil.WantThreadsOn(t, "a child started on its own CPUs, unconfined", child, rest)
	testutil.WantThreadsOn(t, "this process, after", os.Getpid(), all)
	wantCaller("that child", child, rest)

	testutil.ConfineSelf(t)
	started := make(chan struct{})
	release := make(chan struct{})
	for range 4 { // threads the runtime starts after Confine
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			<-release
		}()
		<-started
	}
	defer close(release)
	testutil.WantThreadsOn(t, "this process, confined", os.Getpid(), first)
	child = startThreaded(t, "")
	testutil.WantThreadsOn(t, "a child started with no CPUs of its own", child, rest)
	testutil.WantThreadsOn(t, "this process, after", os.Getpid(), first)
	wantCaller("that child", child, "")
	testutil.WantThreadsOn(t, "a child started on CPUs all set apart", startThreaded(t, first), rest)
	startLocked(t, first, rest)
	if got, err := cpuaffinity.Caller(os.Getpid()); !errors.Is(err, cpuaffinity.ErrNoCPU) ||
		!strings.Contains(err.Error(), "may run only on CPUs "+first+", and the daemon runs users' processes on "+rest+" only") {
		t.Errorf("Caller(this process, on the CPUs set apart) = %q, %v; want ErrNoCPU naming both lists", got, err)
	}
}

// startThreaded starts, by StartOn with cpus, a child with four threads
// (python3's), all running when it returns its pid; it ends with t.
func startThreaded(t *testing.T, cpus string) int {
	t.Helper()
	child := exec.Command("python3", "-c", "import threading,sys; [threading.Thread(target=sys.stdin.read).start() for _ in range(3)]; print(flush=True); sys.stdin.read()")
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cpuaffinity.StartOn(cpus, child.Start); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); child.Wait() })
	if _, err := out.Read(make([]byte, 1)); err != nil { // its threads run
		t.Fatal(err)
	}
	pid := child.Process.Pid
	if tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task"); err != nil || len(tasks) != 4 {
		t.Fatalf("the child has %d threads (%v), want 4", len(tasks), err)
	}
	return pid
}

// startLocked checks StartOnLocked from a locked thread on CPUs own: the
// child is born on users, and the thread has own back, said restored.
func startLocked(t *testing.T, own, users string) {
	t.Helper()
	child := exec.Command("sleep", "1000")
	var restored bool
	var err, afterErr error
	var after unix.CPUSet
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		restored, err = cpuaffinity.StartOnLocked("", child.Start)
		afterErr = unix.SchedGetaffinity(0, &after)
	}()
	<-done
	if err != nil || afterErr != nil {
		t.Fatal(err, afterErr)
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	testutil.WantThreadsOn(t, "a child started from a locked thread", child.Process.Pid, users)
	if got := cpuaffinity.Format(after); !restored || got != own {
		t.Errorf("the locked thread after StartOnLocked: on CPUs %s, restored %v; want %s, true", got, restored, own)
	}
}

// TestConfineToNoUsableCPU: a set this process may not run on is refused
// and changes nothing.
func TestConfineToNoUsableCPU(t *testing.T) {
	var orig, none unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.IsSet(1023) {
		t.Skip("this machine has CPU 1023")
	}
	none.Set(1023)
	if _, err := cpuaffinity.Confine(none); err == nil || !strings.Contains(err.Error(), "none of these CPUs") {
		t.Fatalf("Confine(1023) = %v, want refused", err)
	}
	testutil.WantThreadsOn(t, "this process, after a refused Confine", os.Getpid(), cpuaffinity.Format(orig))
}
