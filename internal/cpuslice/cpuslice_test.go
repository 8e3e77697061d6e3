package cpuslice

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
)

// needSlices skips where the kernel keeps no per-thread slice, and puts
// every thread back at the default when t ends.
func needSlices(t *testing.T) (def time.Duration) {
	t.Helper()
	def, err := Of(unix.Gettid())
	if err != nil || def == 0 {
		t.Skipf("no per-thread slice here (Linux 6.12+): %v", err)
	}
	t.Cleanup(func() {
		tids, _ := procfs.SelfThreads()
		for _, tid := range tids {
			a, err := unix.SchedGetAttr(tid, 0)
			if err == nil {
				unix.SchedSetAttr(tid, &unix.SchedAttr{Policy: a.Policy, Nice: a.Nice}, 0)
			}
		}
	})
	return def
}

// TestSetGivesEveryThreadTheSliceAndKeepsNice: every thread there was
// before Set has the slice after it, its nice kept. A thread the runtime
// starts later begins at the default (reset on fork: Keep's work), so
// Set again changes only such threads.
func TestSetGivesEveryThreadTheSliceAndKeepsNice(t *testing.T) {
	def := needSlices(t)
	testutil.HoldThreads(t, 4)
	want := 250 * time.Microsecond
	if want == def {
		want = 300 * time.Microsecond
	}
	nice, err := ProcessNice()
	if err != nil {
		t.Fatal(err)
	}
	before, err := procfs.SelfThreads()
	if err != nil {
		t.Fatal(err)
	}
	n, err := Set(want, nice)
	if err != nil {
		t.Fatal(err)
	}
	if n < 5 {
		t.Errorf("Set changed %d threads; want every one (at least the 5 held)", n)
	}
	for _, tid := range before {
		a, err := unix.SchedGetAttr(tid, 0)
		if err == unix.ESRCH {
			continue // ended since
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Duration(a.Runtime) != want || a.Flags&unix.SCHED_FLAG_RESET_ON_FORK == 0 || int(a.Nice) != nice {
			t.Errorf("thread %d: slice %v, flags %#x, nice %d; want %v, reset on fork, nice %d", tid, time.Duration(a.Runtime), a.Flags, a.Nice, want, nice)
		}
	}
	after, err := procfs.SelfThreads()
	if err != nil {
		t.Fatal(err)
	}
	born := len(slices.DeleteFunc(after, func(tid int) bool { return slices.Contains(before, tid) }))
	if n, err := Set(want, nice); err != nil || n > born {
		t.Errorf("Set again changed %d threads (%v); want at most the %d started since", n, err, born)
	}
}

// A process the daemon starts (a user's tree's supervisor, CRIU) begins
// at the kernel's default slice and nice, not the daemon's.
func TestChildrenStartAtTheDefault(t *testing.T) {
	def := needSlices(t)
	runtime.LockOSThread() // the fork below is from this thread
	defer runtime.UnlockOSThread()
	if _, err := Set(Min, 0); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("grep", "se.slice", "/proc/self/sched").Output()
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(out))
	got, err := strconv.ParseInt(f[len(f)-1], 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", out, err)
	}
	if time.Duration(got) != def {
		t.Errorf("child's slice %v; want the default %v", time.Duration(got), def)
	}
}

func TestKeepSetsTheSlice(t *testing.T) {
	if _, err := os.Stat("/proc/self/sched"); err != nil {
		t.Skip(err)
	}
	needSlices(t)
	ctx := t.Context()
	if err := Keep(ctx, Min, time.Hour); err != nil {
		t.Fatalf("Keep(%v): %v", Min, err)
	}
	if got, _ := Of(unix.Gettid()); got != Min {
		t.Errorf("slice %v after Keep; want %v", got, Min)
	}
}
