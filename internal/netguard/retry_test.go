package netguard

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fakeSleep records the waits a Retry asks for and returns at once, false
// once stopped is set.
type fakeSleep struct {
	waits   []time.Duration
	stopped bool
}

func (f *fakeSleep) sleep(d time.Duration, _ <-chan struct{}) bool {
	f.waits = append(f.waits, d)
	return !f.stopped
}

func newTestRetry() (*Retry, *fakeSleep, *[]error) {
	var logged []error
	r := NewRetry(func(err error) { logged = append(logged, err) })
	f := &fakeSleep{}
	r.sleep = f.sleep
	return r, f, &logged
}

// TestRetryBacksOff: a run of failures waits 5ms, doubling to 1s, and is
// logged once; a success starts over, and the next failure is a new
// episode, logged again.
func TestRetryBacksOff(t *testing.T) {
	r, f, logged := newTestRetry()
	for range 11 {
		if !r.Failed(syscall.EMFILE, nil) {
			t.Fatal("Failed said stop while the sleep was not stopped")
		}
	}
	ms := time.Millisecond
	want := []time.Duration{5 * ms, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second, time.Second}
	if !slices.Equal(f.waits, want) {
		t.Fatalf("waits %v, want %v", f.waits, want)
	}
	if len(*logged) != 1 || !errors.Is((*logged)[0], syscall.EMFILE) {
		t.Fatalf("one episode logged %v, want the first error once", *logged)
	}

	r.Succeeded()
	r.Succeeded()
	f.waits = nil
	r.Failed(syscall.ENFILE, nil)
	r.Failed(syscall.ENFILE, nil)
	if want := []time.Duration{5 * ms, 10 * ms}; !slices.Equal(f.waits, want) {
		t.Fatalf("after a success, waits %v, want %v", f.waits, want)
	}
	if len(*logged) != 2 || !errors.Is((*logged)[1], syscall.ENFILE) {
		t.Fatalf("second episode: logged %v", *logged)
	}

	f.stopped = true
	if r.Failed(syscall.EMFILE, nil) {
		t.Fatal("Failed went on after its wait was stopped")
	}
}

// TestRetrySleep: the wait lasts its delay (on synctest's clock), and a
// closed stop ends it at once with false.
func TestRetrySleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !sleep(time.Second, make(chan struct{})) || time.Since(start) != time.Second {
			t.Fatalf("sleep(1s) returned after %v", time.Since(start))
		}
		stop := make(chan struct{})
		close(stop)
		start = time.Now()
		if sleep(time.Hour, stop) || time.Since(start) != 0 {
			t.Fatalf("sleep with stop closed went on for %v", time.Since(start))
		}
	})
}
