package rtprio

import (
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/testutil"
)

// keep runs Keep for the test, skipping where the kernel refuses the
// real-time class here, and waits for its goroutine's last pass when the
// test ends.
func keep(t *testing.T, o Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	changed := o.Changed
	o.Changed = func(rt bool) {
		if changed != nil {
			changed(rt)
		}
	}
	err := Keep(ctx, o)
	if errors.Is(err, ErrRefused) {
		cancel()
		t.Skipf("no real-time class for this process here: %v", err)
	}
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		waitThreads(t, unix.SCHED_NORMAL, 0)
	})
}

// threadsNot lists this process's threads not in policy at priority.
func threadsNot(t *testing.T, policy, priority int) []int {
	t.Helper()
	tids, err := procfs.SelfThreads()
	if err != nil {
		t.Fatal(err)
	}
	return offClass(tids, policy, priority)
}

// offClass lists the threads of tids, of those still there, that are not
// in policy at priority.
func offClass(tids []int, policy, priority int) []int {
	var off []int
	for _, tid := range tids {
		if p, prio, err := Of(tid); err == nil && (p != policy || prio != priority) {
			off = append(off, tid)
		}
	}
	return off
}

// waitThreads waits for every thread to be in policy at priority; Keep's
// passes are what it waits on, and nothing says when one has run.
func waitThreads(t *testing.T, policy, priority int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for off := threadsNot(t, policy, priority); len(off) > 0; off = threadsNot(t, policy, priority) {
		if time.Now().After(deadline) {
			t.Fatalf("threads %v not in policy %d at priority %d after 10 s", off, policy, priority)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every thread is in the real-time class once Keep returns, threads
// started since too (at the next pass); a process started from any of them begins in the fair
// class; when Keep's context ends they all go back to the fair class (the
// cleanup's wait).
func TestKeepRunsThreadsAtRealTimeNotWhatTheyStart(t *testing.T) {
	testutil.HoldThreads(t, 3)
	before, err := procfs.SelfThreads()
	if err != nil {
		t.Fatal(err)
	}
	keep(t, Options{Priority: 3, Budget: 4, Window: 10 * time.Millisecond, Pass: 20 * time.Millisecond})
	if off := offClass(before, unix.SCHED_FIFO, 3); len(off) > 0 {
		t.Fatalf("threads %v not at SCHED_FIFO 3 once Keep returned", off)
	}
	testutil.HoldThreads(t, 3) // new threads: the runtime's clone resets them to the fair class
	waitThreads(t, unix.SCHED_FIFO, 3)

	if p, prio, err := Of(testutil.Sleeper(t)); err != nil || p != unix.SCHED_NORMAL || prio != 0 {
		t.Errorf("a started process: policy %d priority %d (%v); want SCHED_OTHER", p, prio, err)
	}
}

// Keep says the threads entered the real-time class; a process that uses
// more CPU than the budget, after idling, leaves it with its threads at
// the fair class's slice, and comes back once it has used less for long
// enough.
func TestKeepLeavesRealTimeOverBudget(t *testing.T) {
	changes := make(chan bool, 16)
	changed := func(rt bool) { // on Keep's goroutine, its pass done
		if !rt { // threads started since the pass are in the fair class too
			if off := threadsNot(t, unix.SCHED_NORMAL, 0); len(off) > 0 {
				t.Errorf("out of real time: threads %v not in the fair class", off)
			}
		}
		changes <- rt
	}
	const window = 10 * time.Millisecond
	keep(t, Options{Priority: 1, Budget: 0.2, Window: window, Pass: time.Hour, Changed: changed})
	select {
	case rt := <-changes:
		if !rt {
			t.Fatal("Keep said the threads left real time first")
		}
	default:
		t.Fatal("Keep returned without saying the threads entered real time")
	}

	// Idle for 20 windows: the first check finds the bucket full and
	// stops the window's ticker, so only the timer on the CPU clock can
	// see the burn below.
	time.Sleep(20 * window)

	stop := make(chan struct{})
	burnt := make(chan struct{})
	go func() { // a CPU's worth: five times the budget
		defer close(burnt)
		for {
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	left := waitChange(t, changes)
	close(stop)
	<-burnt
	if left {
		t.Fatal("went back to real time before leaving it")
	}
	if !waitChange(t, changes) {
		t.Fatal("left real time twice in a row")
	}
	waitThreads(t, unix.SCHED_FIFO, 1)
}

func waitChange(t *testing.T, changes <-chan bool) bool {
	t.Helper()
	select {
	case rt := <-changes:
		return rt
	case <-time.After(10 * time.Second):
		t.Fatal("no change of class in 10 s")
		return false
	}
}

func TestKeepRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Priority: 0, Budget: 1, Window: time.Millisecond, Pass: time.Millisecond},
		{Priority: 100, Budget: 1, Window: time.Millisecond, Pass: time.Millisecond},
		{Priority: 1, Budget: 0, Window: time.Millisecond, Pass: time.Millisecond},
		{Priority: 1, Budget: 1, Window: time.Second, Pass: time.Millisecond},
	} {
		if err := Keep(context.Background(), o); err == nil || errors.Is(err, ErrRefused) {
			t.Errorf("Keep(%+v): %v; want a bad options error", o, err)
		}
	}
	if off := threadsNot(t, unix.SCHED_NORMAL, 0); len(off) > 0 {
		t.Errorf("threads %v moved by refused options", off)
	}
}
