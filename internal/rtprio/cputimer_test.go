package rtprio

import (
	"testing"
	"time"
)

// The timer fires on the CPU the process uses, not on wall time: a
// process that sleeps is not woken, one that works is, once it has used
// what the timer was set to.
func TestCPUTimerFiresOnCPUUsedNotTime(t *testing.T) {
	timer, err := newCPUTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer timer.close()
	const d = 30 * time.Millisecond
	start := cpuUsed()
	if err := timer.set(d); err != nil {
		t.Fatal(err)
	}
	idle := time.NewTimer(10 * d)
	select {
	case <-timer.fired:
		if used := cpuUsed() - start; used < d {
			t.Fatalf("fired after %v of CPU, set to %v, while the test slept", used, d)
		}
		t.Skipf("the process used %v of CPU while the test slept: nothing to tell from wall time here", cpuUsed()-start)
	case <-idle.C:
	}

	start = cpuUsed()
	if err := timer.set(d); err != nil {
		t.Fatal(err)
	}
	for burnt := false; !burnt; {
		select {
		case <-timer.fired:
			burnt = true
		default:
		}
	}
	if used := cpuUsed() - start; used < d {
		t.Fatalf("fired after %v of CPU, set to %v", used, d)
	}

	if err := timer.set(0); err != nil { // disarmed: nothing more
		t.Fatal(err)
	}
	for end := cpuUsed() + 2*d; cpuUsed() < end; {
	}
	select {
	case <-timer.fired:
		t.Fatal("fired once disarmed")
	default:
	}
}
