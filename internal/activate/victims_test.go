package activate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestVictims(t *testing.T) {
	run := func(name string, uid uint32, last uint64, gpus ...string) candidate {
		return candidate{Proc: Proc{Name: name, ID: name, UID: uid, State: api.StateRunning, GPUs: gpus}, last: last}
	}
	target := Proc{Name: "t", ID: "t", UID: 1, State: api.StateFrozen, GPUs: []string{"g0"}}
	held := run("held", 1, 0, "g0")
	held.held = true
	job := run("job", 1, 0, "g0")
	job.Job = true
	mps := run("mps", 1, 0, "g0")
	mps.MPS = true
	frozen := run("frozen", 1, 0, "g0")
	frozen.State = api.StateFrozen
	procs := []candidate{
		run("c", 1, 30, "g0"), run("a", 1, 10, "g0"), run("b", 1, 10, "g0", "g1"), run("new", 1, 0, "g0"),
		run("other-gpu", 1, 0, "g1"), run("theirs", 2, 0, "g0"), run("t", 1, 0, "g0"),
		held, job, mps, frozen,
	}
	for _, c := range []struct {
		label  string
		target Proc
		evict  []string
		want   string
	}{
		{"least recently active first, never active before all, then by name", target, nil, "[new a b c]"},
		{"evict in its order, only running ones of the owner, never held", target, []string{"c", "held", "theirs", "frozen", "job", "a", "c"}, "[c job a]"},
		{"evict empty: none", target, []string{}, "[]"},
		{"a target on no GPU: any of the owner's", Proc{Name: "t", UID: 1}, nil, "[new other-gpu a b c]"},
	} {
		if got := fmt.Sprint(victims(c.target, procs, c.evict)); got != c.want {
			t.Errorf("%s: %s, want %s", c.label, got, c.want)
		}
	}
}

func TestHoldsCountAndEndOnce(t *testing.T) {
	s := newState()
	r1, r2 := s.hold("id1"), s.hold("id1")
	r1()
	r1() // a second call changes nothing
	if !s.isHeld("id1") {
		t.Fatal("one of two holds ended, and p is not held")
	}
	if s.isHeld("id2") {
		t.Fatal("a new process with the reused name is held")
	}
	r2()
	if s.isHeld("id1") {
		t.Fatal("every hold ended, and p is still held")
	}
	if s.lastActive("id1") == 0 {
		t.Fatal("the end of a hold does not mark p active")
	}
}

func TestOwnerLockSerializesOneOwner(t *testing.T) {
	s := newState()
	unlock, err := s.lockOwner(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.lockOwner(context.Background(), 2) // another owner goes ahead
	if err != nil {
		t.Fatal(err)
	}
	other()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.lockOwner(ctx, 1); err != context.DeadlineExceeded {
		t.Fatalf("second activation of owner 1 while one runs: %v, want it to wait", err)
	}
	got := make(chan error)
	go func() {
		u, err := s.lockOwner(context.Background(), 1)
		if err == nil {
			u()
		}
		got <- err
	}()
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
