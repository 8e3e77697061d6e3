package daemon

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestMemoryLimitFollowsLiveHeap: a live heap past the soft limit (as a
// hundred thousand queued jobs make) raises the limit above it, so that
// the collector does not run all the time; once the heap shrinks the
// limit comes back to softMemoryLimit.
func TestMemoryLimitFollowsLiveHeap(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	setMemoryLimit()
	held := make([]byte, 2*softMemoryLimit)
	for i := range held {
		held[i] = 1 // touched: live, not just reserved
	}
	runtime.GC()
	tuneMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got <= int64(len(held)) {
		t.Errorf("with %d MiB live the soft limit is %d MiB; want it above the live heap", len(held)>>20, got>>20)
	}
	runtime.KeepAlive(held)
	held = nil
	runtime.GC()
	tuneMemoryLimit()
	if got := debug.SetMemoryLimit(-1); got != softMemoryLimit {
		t.Errorf("with the heap shrunk the soft limit is %d MiB, want %d MiB", got>>20, softMemoryLimit>>20)
	}
}
