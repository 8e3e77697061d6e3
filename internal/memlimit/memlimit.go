// Package memlimit keeps the Go runtime's soft memory limit
// (debug.SetMemoryLimit) where it saves memory without taxing the
// collector: at Floor while the daemon is small, so that the garbage of a
// large reply (a list of ten thousand jobs) is collected and returned to
// the system early, and, after every collection, at least half the live
// heap (16 MiB at least) above what the runtime then holds besides free
// pages. A limit within reach of that, as a limit that followed the live
// heap alone and once a second was, has the collector run back to back:
// under a user's flood of connections and queued jobs, 200 collections a
// second and most of 16 CPUs.
package memlimit

import (
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"sync/atomic"
)

// Floor is the least soft limit, what an idle daemon runs under.
const Floor = 64 << 20

// minHeadroom is the least the heap may grow past its live part before
// the limit makes the collector run.
const minHeadroom = 16 << 20

// current is the limit set last; 0 while GOMEMLIMIT rules, or before Start.
var current atomic.Int64

var started sync.Once

// Start sets the soft limit to Floor, unless GOMEMLIMIT is set, and from
// then on sets it again after every collection.
func Start() {
	started.Do(func() {
		if os.Getenv("GOMEMLIMIT") != "" {
			return
		}
		debug.SetMemoryLimit(Floor)
		current.Store(Floor)
		afterNextGC()
	})
}

// afterNextGC has tune run once the collector has found a fresh object
// unreachable (its cleanup runs after the cycle that freed it), arming
// itself again first, so that a collection that follows the tune is seen
// too: an idle daemon, which does not collect, does not wake for this.
func afterNextGC() {
	runtime.AddCleanup(&sentinel{}, func(struct{}) {
		afterNextGC()
		tune()
	}, struct{}{})
}

// sentinel holds a pointer so that the allocator does not batch it with
// other tiny objects (which would delay its cleanup).
type sentinel struct{ _ *byte }

// tune sets the limit for the runtime's memory as it is now, when it
// differs from the current one by more than a tenth (setting it stops the
// world).
func tune() {
	cur := current.Load()
	if cur == 0 {
		return
	}
	s := []rtmetrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	rtmetrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != rtmetrics.KindUint64 {
			return
		}
	}
	live := int64(s[0].Value.Uint64())
	overhead := int64(s[1].Value.Uint64()) - int64(s[2].Value.Uint64()) - int64(s[3].Value.Uint64()) - int64(s[4].Value.Uint64())
	want := limitFor(live, overhead)
	if d := want - cur; d > cur/10 || -d > cur/10 {
		debug.SetMemoryLimit(want)
		current.Store(want)
	}
	if f := tuned.Load(); f != nil {
		(*f)()
	}
}

// tuned, when set, is called after each tune; tests await it.
var tuned atomic.Pointer[func()]

// limitFor is the soft limit for a live heap of live bytes in a runtime
// that holds overhead bytes besides the heap's objects and free pages
// (goroutine stacks, fragmentation, the runtime's own structures):
// Floor, or enough that the heap may grow by half its live size first.
func limitFor(live, overhead int64) int64 {
	return max(Floor, max(overhead, 0)+live+max(live/2, minHeadroom))
}
