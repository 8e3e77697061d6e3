package backoff

import (
	"testing"
	"time"
)

// clock is the injected time: seconds after t0.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// step is one call on a Set[string, int] with min 1s and max 8s: "ready",
// "fail", "succeed" or "retain" (keeping only key "a" on subject 1).
type step struct {
	op      string
	key     string
	subject int
	sec     float64
	// ready: the answer; fail: the streak's Failures and Next (seconds);
	// succeed: the Failures of the streak it ended.
	want     bool
	failures int
	next     float64
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"no streak is ready", []step{
			{op: "ready", key: "a", subject: 1, sec: 0, want: true},
		}},
		{"waits double up to the max", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "ready", key: "a", subject: 1, sec: 0.5, want: false},
			{op: "ready", key: "a", subject: 1, sec: 1, want: true},
			{op: "fail", key: "a", subject: 1, sec: 1, failures: 2, next: 3},
			{op: "ready", key: "a", subject: 1, sec: 2.9, want: false},
			{op: "fail", key: "a", subject: 1, sec: 3, failures: 3, next: 7},
			{op: "fail", key: "a", subject: 1, sec: 7, failures: 4, next: 15},
			{op: "fail", key: "a", subject: 1, sec: 15, failures: 5, next: 23},
			{op: "fail", key: "a", subject: 1, sec: 23, failures: 6, next: 31},
			{op: "ready", key: "a", subject: 1, sec: 30, want: false},
		}},
		{"the wait counts from the failure, not from when it was due", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "a", subject: 1, sec: 100, failures: 2, next: 102},
		}},
		{"success ends the streak", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "a", subject: 1, sec: 1, failures: 2, next: 3},
			{op: "succeed", key: "a", failures: 2},
			{op: "ready", key: "a", subject: 1, sec: 1, want: true},
			{op: "fail", key: "a", subject: 1, sec: 4, failures: 1, next: 5},
		}},
		{"success without a streak", []step{
			{op: "succeed", key: "a", failures: 0},
		}},
		{"another subject ends the streak when asked", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "a", subject: 1, sec: 1, failures: 2, next: 3},
			{op: "ready", key: "a", subject: 2, sec: 1.5, want: true},
			{op: "ready", key: "a", subject: 1, sec: 1.5, want: true},
		}},
		{"another subject starts a new streak on failure", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "a", subject: 1, sec: 1, failures: 2, next: 3},
			{op: "fail", key: "a", subject: 2, sec: 2, failures: 1, next: 3},
		}},
		{"keys are independent", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "a", subject: 1, sec: 1, failures: 2, next: 3},
			{op: "ready", key: "b", subject: 1, sec: 1, want: true},
			{op: "fail", key: "b", subject: 1, sec: 1, failures: 1, next: 2},
		}},
		{"retain drops gone keys and changed subjects", []step{
			{op: "fail", key: "a", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "b", subject: 1, sec: 0, failures: 1, next: 1},
			{op: "fail", key: "c", subject: 2, sec: 0, failures: 1, next: 1},
			{op: "retain"},
			{op: "ready", key: "a", subject: 1, sec: 0.5, want: false},
			{op: "ready", key: "b", subject: 1, sec: 0.5, want: true},
			{op: "fail", key: "c", subject: 2, sec: 0.5, failures: 1, next: 1.5},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New[string, int](time.Second, 8*time.Second)
			for i, s := range tc.steps {
				switch s.op {
				case "ready":
					if got := b.Ready(s.key, s.subject, at(s.sec)); got != s.want {
						t.Fatalf("step %d: Ready(%s, %d) at %vs = %v, want %v", i, s.key, s.subject, s.sec, got, s.want)
					}
				case "fail":
					got := b.Fail(s.key, s.subject, at(s.sec))
					if got.Failures != s.failures || !got.Next.Equal(at(s.next)) {
						t.Fatalf("step %d: Fail(%s, %d) at %vs = %d failures, next %v; want %d, next %vs",
							i, s.key, s.subject, s.sec, got.Failures, got.Next.Sub(t0), s.failures, s.next)
					}
				case "succeed":
					if got := b.Succeed(s.key); got.Failures != s.failures {
						t.Fatalf("step %d: Succeed(%s) ended %d failures, want %d", i, s.key, got.Failures, s.failures)
					}
				case "retain":
					b.Retain(func(k string, subject int) bool { return k == "a" && subject == 1 })
				}
			}
		})
	}
}

func TestStreakSince(t *testing.T) {
	b := New[string, int](time.Second, time.Minute)
	b.Fail("a", 1, at(5))
	if s := b.Fail("a", 1, at(6)); !s.Since.Equal(at(5)) {
		t.Fatalf("Since = %v, want the first failure's time", s.Since.Sub(t0))
	}
}

// TestMaxDoesNotOverflow: a streak of any length waits at most max.
func TestMaxDoesNotOverflow(t *testing.T) {
	b := New[string, int](time.Second, 10*time.Minute)
	now := t0
	for range 200 {
		s := b.Fail("a", 1, now)
		if w := s.Next.Sub(now); w <= 0 || w > 10*time.Minute {
			t.Fatalf("failure %d waits %v", s.Failures, w)
		}
		now = s.Next
	}
}
