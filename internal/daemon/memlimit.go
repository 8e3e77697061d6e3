package daemon

import (
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync/atomic"
)

// softMemoryLimit is the Go heap size past which the garbage collector
// works harder (GOMEMLIMIT overrides it): large replies, such as a list of
// ten thousand jobs, then do not leave the daemon holding their garbage.
const softMemoryLimit = 64 << 20

// memoryLimit is the soft limit set last; 0 while GOMEMLIMIT rules.
var memoryLimit atomic.Int64

// setMemoryLimit sets the soft limit to softMemoryLimit, unless GOMEMLIMIT
// is set.
func setMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softMemoryLimit)
		memoryLimit.Store(softMemoryLimit)
	}
}

// tuneMemoryLimit keeps the soft limit half as much again above the live
// heap once the heap outgrows softMemoryLimit (a hundred thousand queued
// jobs do), and back at it when the heap shrinks. A limit under the live
// heap has the collector run all the time: most of what an idle daemon
// with a large queue burned.
func tuneMemoryLimit() {
	cur := memoryLimit.Load()
	if cur == 0 {
		return
	}
	s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(s)
	if s[0].Value.Kind() != rtmetrics.KindUint64 {
		return
	}
	live := int64(s[0].Value.Uint64())
	want := max(softMemoryLimit, live+live/2)
	if d := want - cur; d > cur/10 || -d > cur/10 {
		debug.SetMemoryLimit(want)
		memoryLimit.Store(want)
	}
}
