package procfs

import (
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSelfThreadsHasTheCallersThread: the thread asking is among them.
func TestSelfThreadsHasTheCallersThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tids, err := SelfThreads()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(tids, unix.Gettid()) || !slices.Contains(tids, unix.Getpid()) {
		t.Fatalf("threads %v lack this thread %d or the main one %d", tids, unix.Gettid(), unix.Getpid())
	}
}
