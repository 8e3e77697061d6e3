// Package rtprio runs the daemon's threads in the kernel's real-time class
// (SCHED_FIFO), so that a thread woken by a request runs at once, ahead of
// every user's process on its CPU, instead of queueing behind them in the
// fair class (sched(7)). What the daemon may spend there is held to a
// budget of CPU: whenever it has used more, its threads go back to the
// fair class until it is within it again. The budget is checked on a
// ticker while the daemon uses CPU, and by a timer on its CPU clock while
// it does not, so an idle daemon is not woken to check.
// SCHED_FLAG_RESET_ON_FORK keeps the class from what the daemon starts:
// processes (and the threads the Go runtime adds, until the next pass)
// begin in the fair class at the kernel's defaults.
package rtprio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cpuslice"
	"github.com/gpusched/gpusched/internal/procfs"
)

// MaxPriority is the highest SCHED_FIFO priority (sched_get_priority_max).
const MaxPriority = 99

// ErrRefused is Keep's answer where the kernel gives this process no
// real-time time: without CAP_SYS_NICE, or where its RT group scheduling
// (CONFIG_RT_GROUP_SCHED, cgroup v1's cpu.rt_runtime_us) leaves this
// process's CPU group none.
var ErrRefused = errors.New("the kernel refused SCHED_FIFO (no CAP_SYS_NICE, or the CPU group's cpu.rt_runtime_us is 0)")

// Options say how Keep runs the threads.
type Options struct {
	Priority int           // SCHED_FIFO priority, 1..MaxPriority
	Budget   float64       // CPUs the threads may use at real time, on average
	Window   time.Duration // how often the CPU used is checked against Budget while the daemon uses it
	Pass     time.Duration // how often threads started since are brought to their class
	Slice    time.Duration // the fair class's slice (cpuslice); 0: the kernel's default
	// Changed, if set, is called each time the threads enter real time
	// (true: first from Keep, once they all have) or leave it (false), in
	// that order, from one goroutine at a time.
	Changed func(realtime bool)
}

// Keep puts every thread in the real-time class now and keeps them there,
// within Budget, until ctx ends; then they go back to the fair class. It
// returns ErrRefused (wrapped) at once where the kernel does not allow it.
func Keep(ctx context.Context, o Options) error {
	if o.Priority < 1 || o.Priority > MaxPriority || o.Budget <= 0 || o.Window <= 0 || o.Pass < o.Window {
		return fmt.Errorf("rtprio: bad options %+v", o)
	}
	nice, err := cpuslice.ProcessNice()
	if err != nil {
		return err
	}
	cpu, err := newCPUTimer()
	if err != nil {
		return err
	}
	t := threads{fifo: o.Priority, nice: nice, slice: o.Slice}
	if err := t.pass(true); err != nil {
		t.pass(false)
		cpu.close()
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: %v", ErrRefused, err)
		}
		return err
	}
	if o.Changed != nil {
		o.Changed(true)
	}
	go t.keep(ctx, o, cpu)
	return nil
}

// keep checks the CPU used each Window and brings the threads to the
// class the budget allows: at once where that changed, and each Pass.
// While the bucket stays full (the daemon is within its budget) the
// window's ticker stops: the timer on the CPU clock starts the checks
// again once the daemon has used what the bucket holds, so an idle daemon
// is not woken to check.
func (t threads) keep(ctx context.Context, o Options, cpu *cpuTimer) {
	defer cpu.close()
	b := newBucket(o.Budget, o.Window)
	tick := time.NewTicker(o.Window)
	defer tick.Stop()
	pass := time.NewTicker(o.Pass)
	defer pass.Stop()
	realtime, last, lastCPU := true, time.Now(), cpuUsed()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			t.pass(false)
			return
		case now = <-tick.C:
		case <-cpu.fired:
			now = time.Now()
		case now = <-pass.C:
			t.pass(realtime) // a failure here is one the first pass did not have; the next tries again
		}
		used := cpuUsed()
		next := b.step(now.Sub(last), used-lastCPU, realtime)
		last, lastCPU = now, used
		if next != realtime {
			t.pass(next)
			realtime = next
			if o.Changed != nil {
				o.Changed(next)
			}
		}
		if realtime && b.full() && cpu.set(b.level) == nil {
			tick.Stop()
		} else {
			cpu.set(0)
			tick.Reset(o.Window)
		}
	}
}

// threads sets this process's threads' scheduling.
type threads struct {
	fifo  int           // the real-time priority
	nice  int           // the fair class's nice: the process's at the start
	slice time.Duration // the fair class's slice; 0: the kernel's default
}

// pass puts every thread in the real-time class, or the fair one.
func (t threads) pass(realtime bool) error {
	tids, err := procfs.SelfThreads()
	if err != nil {
		return err
	}
	want := t.attr(realtime)
	for _, tid := range tids {
		if err := setThread(tid, want); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: the thread exited
			return err
		}
	}
	return nil
}

// attr is the scheduling of a thread in the real-time class or the fair one.
func (t threads) attr(realtime bool) unix.SchedAttr {
	if realtime {
		return unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: uint32(t.fifo), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
	}
	return unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL, Nice: int32(t.nice), Runtime: uint64(t.slice), Flags: unix.SCHED_FLAG_RESET_ON_FORK}
}

// setThread gives thread tid want, where it has not already.
func setThread(tid int, want unix.SchedAttr) error {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return err
	}
	same := a.Policy == want.Policy && a.Priority == want.Priority && a.Flags&unix.SCHED_FLAG_RESET_ON_FORK != 0
	if want.Policy == unix.SCHED_NORMAL { // nice and slice are the fair class's alone
		same = same && a.Nice == want.Nice && (want.Runtime == 0 || a.Runtime == want.Runtime)
	}
	if same {
		return nil
	}
	return unix.SchedSetAttr(tid, &want, 0)
}

// Of is thread tid's policy and real-time priority.
func Of(tid int) (policy, priority int, err error) {
	a, err := unix.SchedGetAttr(tid, 0)
	if err != nil {
		return 0, 0, err
	}
	return int(a.Policy), int(a.Priority), nil
}
