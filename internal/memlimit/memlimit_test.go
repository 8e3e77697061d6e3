package memlimit

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestLimitFor(t *testing.T) {
	for _, c := range []struct {
		name           string
		live, overhead int64
		want           int64
	}{
		{"idle daemon", 4 << 20, 6 << 20, Floor},
		{"a heap half the floor", 32 << 20, 0, Floor},
		{"live heap past the floor", 100 << 20, 10 << 20, 10<<20 + 150<<20},
		{"small heap, large stacks", 2 << 20, 70 << 20, 70<<20 + 2<<20 + minHeadroom},
		{"negative overhead (metrics read apart) counts as none", 100 << 20, -5 << 20, 150 << 20},
	} {
		if got := limitFor(c.live, c.overhead); got != c.want {
			t.Errorf("%s: limitFor(%d MiB live, %d MiB overhead) = %d MiB, want %d MiB", c.name, c.live>>20, c.overhead>>20, got>>20, c.want>>20)
		}
	}
}

// startAtFloor starts the tuning (once per process) with the limit at
// Floor, and puts the limit back as it was when t ends.
func startAtFloor(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	was := debug.SetMemoryLimit(Floor)
	current.Store(Floor)
	Start()
	t.Cleanup(func() {
		debug.SetMemoryLimit(was)
		current.Store(was)
	})
}

// awaitTune collects garbage and waits for the tune that follows it.
func awaitTune(t *testing.T) {
	t.Helper()
	done := make(chan struct{}, 1)
	signal := func() {
		select {
		case done <- struct{}{}:
		default:
		}
	}
	tuned.Store(&signal)
	defer tuned.Store(nil)
	runtime.GC()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("no tune within 10 s of a collection")
	}
}

// TestLimitFollowsTheHeapAfterACollection: a live heap past the floor
// raises the limit above it after the next collection, with no call from
// the daemon; once the heap shrinks the limit comes back to the floor.
func TestLimitFollowsTheHeapAfterACollection(t *testing.T) {
	startAtFloor(t)
	held := make([]byte, 2*Floor)
	for i := range held {
		held[i] = 1 // touched: live, not just reserved
	}
	awaitTune(t)
	if got := debug.SetMemoryLimit(-1); got < int64(len(held))*3/2 {
		t.Errorf("with %d MiB live the soft limit is %d MiB; want half as much again at least", len(held)>>20, got>>20)
	}
	runtime.KeepAlive(held)
	held = nil
	awaitTune(t)
	if got := debug.SetMemoryLimit(-1); got != Floor {
		t.Errorf("with the heap shrunk the soft limit is %d MiB, want %d MiB", got>>20, Floor>>20)
	}
}

// TestNoCollectionSpiralUnderLargeStacks: goroutine stacks count against
// the limit. With as many of them as the floor (a flood of connections
// whose goroutines decoded deep requests) and a small heap, a limit that
// followed the heap alone left the collector no room, and it ran back to
// back; the limit leaves room for the heap to grow by minHeadroom.
func TestNoCollectionSpiralUnderLargeStacks(t *testing.T) {
	startAtFloor(t)
	release := make(chan struct{})
	grown := make(chan struct{})
	const goroutines = 1100 // 64 KiB of stack each: Floor and then some
	for range goroutines {
		go func() { deep(24, grown, release) }()
	}
	defer close(release)
	for range goroutines {
		<-grown
	}
	awaitTune(t)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const garbage = 256 << 20
	var sink []byte
	for range garbage / (64 << 10) {
		sink = make([]byte, 64<<10)
	}
	runtime.KeepAlive(sink)
	runtime.ReadMemStats(&after)
	stacks := after.StackInuse >> 20
	t.Logf("%d GCs, stacks %d MiB, limit %d MiB", after.NumGC-before.NumGC, stacks, debug.SetMemoryLimit(-1)>>20)
	// With room of minHeadroom (16 MiB) per collection: 16 or so.
	if n := after.NumGC - before.NumGC; n > 64 {
		t.Errorf("%d collections for %d MiB of garbage beside %d MiB of stacks (limit %d MiB): the collector spiralled", n, garbage>>20, stacks, debug.SetMemoryLimit(-1)>>20)
	}
}

// deep grows its goroutine's stack to about 2 KiB a level, says so, and
// holds it until release.
func deep(levels int, grown, release chan struct{}) byte {
	var pad [2048]byte
	if levels == 0 {
		grown <- struct{}{}
		<-release
		return pad[0]
	}
	pad[levels] = byte(levels)
	return deep(levels-1, grown, release) + pad[levels]
}
