package cpuaffinity_test

import (
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

// TestConfineAndRelease: Confine holds every thread of the process, and
// the threads and processes started after it, on its CPUs; ReleaseProcess
// puts a process started since, every thread of it, on the CPUs this one
// had before less those set apart.
func TestConfineAndRelease(t *testing.T) {
	first, rest := testutil.ConfineSelf(t)
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

	// A child with threads of its own: python3's, started before the release.
	child := exec.Command("python3", "-c", "import threading,sys; [threading.Thread(target=sys.stdin.read).start() for _ in range(3)]; print(flush=True); sys.stdin.read()")
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
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
	testutil.WantThreadsOn(t, "the child, before its release (inherited)", pid, first)
	if err := cpuaffinity.ReleaseProcess(pid); err != nil {
		t.Fatal(err)
	}
	testutil.WantThreadsOn(t, "the child, released", pid, rest)
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
