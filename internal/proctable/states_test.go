package proctable

import (
	"maps"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestViewStates: each view counts each owner's records by state, through
// creations, updates, removals and a reload.
func TestViewStates(t *testing.T) {
	tb, st, _ := newTable(t)
	owned := func(name string, uid uint32, s api.State) Record {
		r := rec(name, s)
		r.Owner.UID = uid
		return r
	}
	check := func(what string, v *View, want map[uint32]map[api.State]int) {
		t.Helper()
		got := v.States()
		if len(got) != len(want) {
			t.Fatalf("%s: States %v, want %v", what, got, want)
		}
		for uid, w := range want {
			if !maps.Equal(got[uid], w) {
				t.Fatalf("%s: States %v, want %v", what, got, want)
			}
		}
	}
	check("empty", tb.View(), nil)
	for _, r := range []Record{owned("a", 1000, api.StateRunning), owned("b", 1000, api.StateRunning), owned("c", 1001, api.StateFrozen)} {
		if _, err := tb.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	check("created", tb.View(), map[uint32]map[api.State]int{1000: {api.StateRunning: 2}, 1001: {api.StateFrozen: 1}})
	if _, err := tb.Update(Key{UID: 1000, Name: "b"}, func(r *Record) error { r.State = api.StateExited; return nil }); err != nil {
		t.Fatal(err)
	}
	before := tb.View()
	check("b exited", before, map[uint32]map[api.State]int{1000: {api.StateRunning: 1, api.StateExited: 1}, 1001: {api.StateFrozen: 1}})
	if _, err := tb.Remove(Key{UID: 1001, Name: "c"}, nil); err != nil {
		t.Fatal(err)
	}
	check("c removed", tb.View(), map[uint32]map[api.State]int{1000: {api.StateRunning: 1, api.StateExited: 1}})
	check("an earlier view, kept", before, map[uint32]map[api.State]int{1000: {api.StateRunning: 1, api.StateExited: 1}, 1001: {api.StateFrozen: 1}})
	again := New(st, nil)
	if _, err := again.Load(); err != nil {
		t.Fatal(err)
	}
	check("reloaded", again.View(), map[uint32]map[api.State]int{1000: {api.StateRunning: 1, api.StateExited: 1}})
}
