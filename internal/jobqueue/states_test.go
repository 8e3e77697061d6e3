package jobqueue_test

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// counted is each owner's jobs by state, counted over View.
func counted(q *jobqueue.Queue) map[uint32]map[api.JobState]int {
	out := map[uint32]map[api.JobState]int{}
	for _, j := range q.View() {
		if out[j.Owner.UID] == nil {
			out[j.Owner.UID] = map[api.JobState]int{}
		}
		out[j.Owner.UID][j.State]++
	}
	return out
}

// sameActive fails t unless Active is View's jobs with a current
// attempt, in order.
func sameActive(t interface{ Fatalf(string, ...any) }, what string, q *jobqueue.Queue) {
	var want []*jobqueue.Job
	for _, j := range q.View() {
		if j.Active() {
			want = append(want, j)
		}
	}
	if !slices.Equal(q.Active(), want) {
		t.Fatalf("%s: Active %v, the active jobs of View %v", what, ids(q.Active()), ids(want))
	}
}

func ids(jobs []*jobqueue.Job) []string {
	out := []string{}
	for _, j := range jobs {
		out = append(out, j.ID+":"+string(j.State))
	}
	return out
}

func sameStates(t interface{ Fatalf(string, ...any) }, what string, got, want map[uint32]map[api.JobState]int) {
	if len(got) != len(want) {
		t.Fatalf("%s: States %v, counted over View %v", what, got, want)
	}
	for uid, w := range want {
		if !maps.Equal(got[uid], w) {
			t.Fatalf("%s: States %v, counted over View %v", what, got, want)
		}
	}
}

// TestStatesAndActiveMatchView: after any sequence of submissions, state
// changes and removals by several owners, and after a reload, States is
// what counting View gives, and Active is View's jobs with a current
// attempt.
func TestStatesAndActiveMatchView(t *testing.T) {
	states := []api.JobState{api.JobQueued, api.JobStarting, api.JobRunning, api.JobPreempted, api.JobDone, api.JobFailed, api.JobCancelled}
	rapid.Check(t, func(rt *rapid.T) {
		dir := filepath.Join(t.TempDir(), "jobs")
		st, err := store.OpenRecords(dir)
		if err != nil {
			rt.Fatalf("%v", err)
		}
		q := jobqueue.New(st, nil)
		for i := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			ids := []string{}
			for _, j := range q.View() {
				ids = append(ids, j.ID)
			}
			switch op := rapid.IntRange(0, 2).Draw(rt, "op"); {
			case op == 0 || len(ids) == 0:
				var jobs []*jobqueue.Job
				for range rapid.IntRange(1, 4).Draw(rt, "n") {
					j := spec("", rapid.SampledFrom(states).Draw(rt, "state"))
					j.Owner.UID = rapid.Uint32Range(1000, 1002).Draw(rt, "uid")
					jobs = append(jobs, j)
				}
				if _, err := q.Add(jobs); err != nil {
					rt.Fatalf("Add: %v", err)
				}
			case op == 1:
				id, s := rapid.SampledFrom(ids).Draw(rt, "id"), rapid.SampledFrom(states).Draw(rt, "to")
				if _, err := q.Update(id, func(j *jobqueue.Job) error { j.State = s; return nil }); err != nil {
					rt.Fatalf("Update: %v", err)
				}
			default:
				id := rapid.SampledFrom(ids).Draw(rt, "id")
				if _, failed, err := q.RemoveAll([]string{id}, "test", nil); err != nil || len(failed) > 0 {
					rt.Fatalf("RemoveAll: %v %v", err, failed)
				}
			}
			sameStates(rt, fmt.Sprintf("step %d", i), q.States(), counted(q))
			sameActive(rt, fmt.Sprintf("step %d", i), q)
		}
		again := jobqueue.New(st, nil)
		if _, err := again.Load(); err != nil {
			rt.Fatalf("Load: %v", err)
		}
		sameStates(rt, "reloaded", again.States(), counted(q))
		sameActive(rt, "reloaded", again)
	})
}
