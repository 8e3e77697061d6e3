package threadprio

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// nice is thread tid's nice value, as the kernel reports it in
// /proc/self/task/TID/stat (field 19).
func nice(t *testing.T, tid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(b), ") ")
	n, err := strconv.Atoi(strings.Fields(after)[16])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLowerAndRestore: the work runs on its thread at nice 19, and the
// thread is back at its nice afterwards.
func TestLowerAndRestore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a thread its priority back takes CAP_SYS_NICE: run as root")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // keep this goroutine's thread, to look at it after
		defer runtime.UnlockOSThread()
		tid := unix.Gettid()
		before := nice(t, tid)
		restore := Lower()
		if got := unix.Gettid(); got != tid {
			t.Errorf("lowered work moved to thread %d from %d", got, tid)
		}
		if got := nice(t, tid); got != Background {
			t.Errorf("nice %d while lowered, want %d", got, Background)
		}
		restore()
		if got := nice(t, tid); got != before {
			t.Errorf("nice %d after restore, want %d", got, before)
		}
	}()
	<-done
}

// TestLowerAtBackgroundChangesNothing: a thread already at Background is
// neither lowered nor raised.
func TestLowerAtBackgroundChangesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("putting the test's thread back takes CAP_SYS_NICE: run as root")
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := unix.Gettid()
		before := nice(t, tid)
		defer unix.Setpriority(unix.PRIO_PROCESS, tid, before)
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, Background); err != nil {
			t.Error(err)
			return
		}
		restore := Lower()
		if got := nice(t, tid); got != Background {
			t.Errorf("nice %d, want %d", got, Background)
		}
		restore()
		if got := nice(t, tid); got != Background {
			t.Errorf("nice %d after a restore of nothing, want %d unchanged", got, Background)
		}
	}()
	<-done
}
