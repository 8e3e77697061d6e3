package cpuaffinity

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

func TestParseAndFormat(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "0"},
		{"0-3", "0-3"},
		{"0-3,8", "0-3,8"},
		{" 2 , 0-1 ", "0-2"},
		{"5,3,4", "3-5"},
		{"1023", "1023"},
		{"0,2,4-6", "0,2,4-6"},
	} {
		set, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if got := Format(set); got != tc.want {
			t.Errorf("Format(Parse(%q)) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, bad := range []string{"", " ", "a", "-1", "3-1", "1-", "0,,1", "1024", "0-1024", "1.5"} {
		if set, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %s, want an error", bad, Format(set))
		}
	}
}

func TestWithout(t *testing.T) {
	for _, tc := range []struct{ from, apart, want string }{
		{"0-15", "0-1", "2-15"},
		{"0-3", "2", "0-1,3"},
		{"0-3", "8", "0-3"},
		{"0-1", "0-1", "0-1"}, // nothing would be left: all of it
		{"0", "0", "0"},
	} {
		from, _ := Parse(tc.from)
		apart, _ := Parse(tc.apart)
		if got := Format(without(from, apart)); got != tc.want {
			t.Errorf("without(%s, %s) = %s, want %s", tc.from, tc.apart, got, tc.want)
		}
	}
}

// threadCPUs is each thread of process pid with its Cpus_allowed_list.
func threadCPUs(t *testing.T, pid int) map[int]string {
	t.Helper()
	out := map[int]string{}
	err := procfs.EachThreadOf(pid, func(tid int) error {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/status")
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				out[tid] = strings.TrimSpace(v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestConfineAndRelease: Confine holds every thread of the process, and
// the threads and processes started after it, on its CPUs; ReleaseProcess
// puts a process started since, every thread of it, on the CPUs this one
// had before less those set apart.
func TestConfineAndRelease(t *testing.T) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	if orig.Count() < 2 {
		t.Skipf("this process may run on %s only: confining it shows nothing", Format(orig))
	}
	t.Cleanup(func() { procfs.EachThread(func(tid int) error { return unix.SchedSetaffinity(tid, &orig) }) })
	var one unix.CPUSet
	first := 0
	for !orig.IsSet(first) {
		first++
	}
	one.Set(first)
	got, err := Confine(one)
	if err != nil || got != one {
		t.Fatalf("Confine(%s) = %s, %v", Format(one), Format(got), err)
	}
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
	for tid, cpus := range threadCPUs(t, os.Getpid()) {
		if cpus != Format(one) {
			t.Errorf("confined: thread %d on CPUs %s, want %s", tid, cpus, Format(one))
		}
	}
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
	if n := len(threadCPUs(t, child.Process.Pid)); n != 4 {
		t.Fatalf("the child has %d threads, want 4", n)
	}
	for tid, cpus := range threadCPUs(t, child.Process.Pid) {
		if cpus != Format(one) {
			t.Errorf("child, before its release: thread %d on CPUs %s, want %s (inherited)", tid, cpus, Format(one))
		}
	}
	if err := ReleaseProcess(child.Process.Pid); err != nil {
		t.Fatal(err)
	}
	rest := orig
	rest.Clear(first)
	for tid, cpus := range threadCPUs(t, child.Process.Pid) {
		if cpus != Format(rest) {
			t.Errorf("child, released: thread %d on CPUs %s, want %s", tid, cpus, Format(rest))
		}
	}
}

// TestConfineToNoUsableCPU: a set this process may not run on is refused
// and changes nothing.
func TestConfineToNoUsableCPU(t *testing.T) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		t.Fatal(err)
	}
	var none unix.CPUSet
	none.Set(maxCPU - 1)
	if orig.IsSet(maxCPU - 1) {
		t.Skip("this machine has the last CPU a set can name")
	}
	if _, err := Confine(none); err == nil || !strings.Contains(err.Error(), "none of these CPUs") {
		t.Fatalf("Confine(%s) = %v, want refused", Format(none), err)
	}
	for tid, cpus := range threadCPUs(t, os.Getpid()) {
		if cpus != Format(orig) {
			t.Errorf("thread %d on CPUs %s after a refused Confine, want %s", tid, cpus, Format(orig))
		}
	}
}
