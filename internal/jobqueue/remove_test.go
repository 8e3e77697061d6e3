package jobqueue_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/pkg/api"
)

// finishedOnly is the check the daemon's prune makes.
func finishedOnly(j *jobqueue.Job) error {
	if !j.State.Terminal() {
		return errors.New("unfinished")
	}
	return nil
}

func TestRemoveAll(t *testing.T) {
	h := newHarness(t)
	h.add(t, named("a", "b", "x")...) // j1..j3
	h.setState(t, "j1", api.JobDone)
	h.setState(t, "j3", api.JobFailed)
	h.add(t, named("x")...) // j4, the newest "x"
	h.setState(t, "j4", api.JobCancelled)
	before := len(h.changes)

	removed, failed, err := h.q.RemoveAll([]string{"j4", "j2", "j1", "j9", "j4"}, "retention", finishedOnly)
	if err != nil {
		t.Fatal(err)
	}
	if got := idNames(removed); !reflect.DeepEqual(got, []string{"j4 x", "j1 a"}) {
		t.Fatalf("removed %v, want j4 then j1", got)
	}
	if len(failed) != 2 || failed["j2"] == nil || !errors.Is(failed["j9"], jobqueue.ErrNotFound) {
		t.Fatalf("failed %v, want j2 refused (unfinished) and j9 not found", failed)
	}
	if got := idNames(h.q.View()); !reflect.DeepEqual(got, []string{"j2 b", "j3 x"}) {
		t.Fatalf("view %v", got)
	}
	if j, ok := h.q.Owned(1000, "x"); !ok || j.ID != "j3" {
		t.Fatalf("x names %v, want j3, the newest left", j)
	}
	if _, ok := h.q.Owned(1000, "a"); ok {
		t.Fatal("a still found")
	}
	if _, ok := h.q.Get("j1"); ok {
		t.Fatal("j1 still found by id")
	}
	got := h.changes[before:]
	if len(got) != 2 || got[0].New != nil || got[0].Old.ID != "j4" || got[1].Old.ID != "j1" || got[0].Why != "retention" {
		t.Fatalf("published %+v", got)
	}

	// After a restart the ids of removed jobs are not handed out again.
	q := h.reopen(t)
	if got := idNames(q.View()); !reflect.DeepEqual(got, []string{"j2 b", "j3 x"}) {
		t.Fatalf("reloaded %v", got)
	}
	added, err := q.Add(named("next"))
	if err != nil {
		t.Fatal(err)
	}
	if added[0].ID != "j5" {
		t.Fatalf("first job after a restart is %s, want j5 (j4 was removed, not forgotten)", added[0].ID)
	}
}

func TestRemoveAllNothingToRemove(t *testing.T) {
	h := newHarness(t)
	h.add(t, named("a")...)
	files := dirState(t, h.dir)
	removed, failed, err := h.q.RemoveAll([]string{"j1"}, "", finishedOnly)
	if err != nil || len(removed) != 0 || failed["j1"] == nil {
		t.Fatalf("RemoveAll = %v, %v, %v; want j1 refused", removed, failed, err)
	}
	if !reflect.DeepEqual(dirState(t, h.dir), files) {
		t.Fatal("a refused removal changed the store")
	}
}
