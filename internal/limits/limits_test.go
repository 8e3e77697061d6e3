package limits

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		uid       uint32
		have, max int
		refused   bool
	}{
		{1000, 0, 2, false}, {1000, 1, 2, false}, {1000, 2, 2, true}, {1000, 9, 2, true},
		{1000, 9, 0, false}, // no cap
		{Root, 9, 2, false}, // the operator
	} {
		err := Check(tc.uid, "alice", tc.have, tc.max, "max-procs-per-user", "live processes")
		var ex *Exceeded
		if got := errors.As(err, &ex); got != tc.refused {
			t.Errorf("Check(uid %d, have %d, max %d) = %v; refused want %v", tc.uid, tc.have, tc.max, err, tc.refused)
			continue
		}
		if tc.refused && (ex.Flag != "max-procs-per-user" || !strings.Contains(ex.Msg, "--max-procs-per-user") || !strings.Contains(ex.Msg, "alice")) {
			t.Errorf("refusal %q does not name the user and the setting", ex.Msg)
		}
	}
}

func TestSlots(t *testing.T) {
	s := NewSlots(2, "max-streams-per-user", "streams open")
	r1, err := s.Take(1000, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(1000, "alice"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(1000, "alice"); err == nil {
		t.Fatal("third slot given past a cap of 2")
	}
	if _, err := s.Take(1001, "bob"); err != nil {
		t.Fatalf("another user refused: %v", err)
	}
	r1()
	r1() // a second release gives nothing back twice
	if got := s.Held(1000); got != 1 {
		t.Fatalf("held after one release = %d, want 1", got)
	}
	if _, err := s.Take(1000, "alice"); err != nil {
		t.Fatalf("slot not given back: %v", err)
	}
	for i := 0; i < 10; i++ {
		if _, err := s.Take(Root, "root"); err != nil {
			t.Fatalf("root refused: %v", err)
		}
	}
}

func TestTurns(t *testing.T) {
	tu := NewTurns(2)
	ctx := context.Background()
	r1, err := tu.Take(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Take(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := tu.Take(canceled, 1000); !errors.Is(err, context.Canceled) {
		t.Fatalf("a third turn at once = %v, want it to wait (here: until its context ends)", err)
	}
	if _, err := tu.Take(canceled, 1001); err != nil {
		t.Fatalf("another user waited for alice's turns: %v", err)
	}
	if _, err := tu.Take(canceled, Root); err != nil {
		t.Fatalf("root waited: %v", err)
	}
	got := make(chan error)
	go func() {
		_, err := tu.Take(ctx, 1000)
		got <- err
	}()
	r1()
	r1() // a second release gives nothing back twice
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if _, err := tu.Take(canceled, 1000); err == nil {
		t.Fatal("a released turn was given back twice")
	}
}
