package limits

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeClock drives a CPUShare's clock and its waits by hand.
type fakeClock struct {
	t     time.Time
	waits chan time.Duration // each wait asked for
	fire  chan time.Time     // ends the wait in progress
}

func newShare(share float64) (*CPUShare, *fakeClock) {
	c := &fakeClock{t: time.Unix(1e9, 0), waits: make(chan time.Duration, 1), fire: make(chan time.Time)}
	s := NewCPUShare(share)
	s.now = func() time.Time { return c.t }
	s.after = func(d time.Duration) <-chan time.Time {
		c.waits <- d
		return c.fire
	}
	return s, c
}

// waitAsync runs s.Wait(uid) in a goroutine; its error comes on the channel.
func waitAsync(ctx context.Context, s *CPUShare, uid uint32) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- s.Wait(ctx, uid) }()
	return ch
}

func TestCPUShareWithinBurstDoesNotWait(t *testing.T) {
	s, _ := newShare(0.25) // a burst of 500 ms of CPU
	s.Charge(1000, 400*time.Millisecond)
	if err := s.Wait(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	s.Charge(1000, 100*time.Millisecond) // exactly the burst
	if err := s.Wait(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
}

func TestCPUShareOverBurstWaitsUntilPaidOff(t *testing.T) {
	s, c := newShare(0.25)
	s.Charge(1000, 800*time.Millisecond) // 300 ms over the burst
	done := waitAsync(context.Background(), s, 1000)
	if d := <-c.waits; d != 1200*time.Millisecond {
		t.Fatalf("waits %v for 300 ms over at a quarter of a CPU, want 1.2s", d)
	}
	// Another user, root and the daemon's own work go on meanwhile.
	for _, uid := range []uint32{1001, Root, Daemon} {
		s.Charge(uid, time.Hour)
		if uid != 1001 {
			if err := s.Wait(context.Background(), uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Wait(context.Background(), 1002); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(1200 * time.Millisecond)
	c.fire <- c.t
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestCPUShareWaitsAgainWhenChargedMeanwhile(t *testing.T) {
	s, c := newShare(0.5) // a burst of 1 s
	s.Charge(1000, 2*time.Second)
	done := waitAsync(context.Background(), s, 1000)
	if d := <-c.waits; d != 2*time.Second {
		t.Fatalf("first wait %v, want 2s", d)
	}
	s.Charge(1000, 500*time.Millisecond) // the user's work on another connection
	c.t = c.t.Add(2 * time.Second)
	c.fire <- c.t
	if d := <-c.waits; d != time.Second {
		t.Fatalf("second wait %v, want 1s for the 500 ms charged meanwhile", d)
	}
	c.t = c.t.Add(time.Second)
	c.fire <- c.t
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(s.owed) != 1 {
		t.Fatalf("%d accounts; want the user's, still owing its burst", len(s.owed))
	}
	c.t = c.t.Add(2 * time.Second)
	if err := s.Wait(context.Background(), 1000); err != nil || len(s.owed) != 0 {
		t.Fatalf("after paying off: err %v, %d accounts kept, want none", err, len(s.owed))
	}
}

func TestCPUShareWaitEndsWithCtx(t *testing.T) {
	s, c := newShare(0.25)
	s.Charge(1000, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := waitAsync(ctx, s, 1000)
	<-c.waits
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want the context's end", err)
	}
}

func TestCPUShareOff(t *testing.T) {
	s, _ := newShare(0)
	s.Charge(1000, time.Hour)
	if err := s.Wait(context.Background(), 1000); err != nil || len(s.owed) != 0 {
		t.Fatalf("share 0: Wait = %v, %d accounts; want no limit and nothing kept", err, len(s.owed))
	}
}

func TestCPUSharePayOffBounded(t *testing.T) {
	for _, tc := range []struct {
		debt time.Duration
		rate float64
		want time.Duration
	}{
		{300 * time.Millisecond, 0.25, 1200 * time.Millisecond},
		{time.Hour, 0.1, maxWait},
		{time.Second, 1e-300, maxWait}, // no overflow into a negative wait
	} {
		if got := payOff(tc.debt, tc.rate); got != tc.want {
			t.Errorf("payOff(%v, %v) = %v, want %v", tc.debt, tc.rate, got, tc.want)
		}
	}
}

func TestCPUShareWithin(t *testing.T) {
	s, c := newShare(0.25) // a burst of 500 ms
	if !s.Within(1000) {
		t.Fatal("a user who owes nothing is not within their share")
	}
	s.Charge(1000, 600*time.Millisecond)
	s.Charge(Root, time.Hour)
	if s.Within(1000) || !s.Within(Root) || !s.Within(1001) {
		t.Fatalf("within: 100 ms over %v, root %v, another user %v; want false, true, true", s.Within(1000), s.Within(Root), s.Within(1001))
	}
	c.t = c.t.Add(400 * time.Millisecond) // 100 ms paid off
	if !s.Within(1000) {
		t.Fatal("not within once paid off")
	}
}
