package bulkgate

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// Budget holds users to a share of the CPU their bulk work takes
// (limits.CPUShare): a user waits before their work is admitted, and is
// charged what each chunk of it took.
type Budget interface {
	Wait(ctx context.Context, uid uint32) error
	Within(uid uint32) bool
	Charge(uid uint32, cpu time.Duration)
}

// chunkStart is where a slot's chunk of work began: the thread it began on
// and that thread's CPU time, and the wall clock.
type chunkStart struct {
	tid  int
	cpu  time.Duration
	wall time.Time
}

func startChunk() chunkStart {
	return chunkStart{tid: unix.Gettid(), cpu: threadCPU(), wall: time.Now()}
}

// took is the CPU the chunk begun at c took: its thread's CPU time since,
// where it ended on the thread it began on (a chunk of bulk work computes
// and reads files, which keep a goroutine on its thread); its wall time
// where the goroutine was moved, as a preempted one may be.
func (c chunkStart) took() time.Duration {
	if unix.Gettid() == c.tid {
		return threadCPU() - c.cpu
	}
	return time.Since(c.wall)
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
