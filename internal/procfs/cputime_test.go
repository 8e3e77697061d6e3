package procfs

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestCPUTimeCountsEveryThread: CPUTime of this test process rises with
// what getrusage says it spent, over a busy loop of 20 ms of CPU.
func TestCPUTimeCountsEveryThread(t *testing.T) {
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := used(); used()-start < 20*time.Millisecond; {
	}
	after, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after-before < 10*time.Millisecond {
		t.Errorf("CPU time rose %v over a busy loop of 20 ms of CPU", after-before)
	}
	if _, err := CPUTime(1 << 30); err == nil {
		t.Error("CPUTime of no process: no error")
	}
}
