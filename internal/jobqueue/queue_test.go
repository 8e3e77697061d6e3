package jobqueue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// spec is a job as the daemon hands it to Add: no id, no sequence number,
// name as given ("" for unnamed).
func spec(name string, state api.JobState) *jobqueue.Job {
	return &jobqueue.Job{
		Name:        name,
		Owner:       jobqueue.Owner{UID: 1000, GID: 1000, Groups: []uint32{1000, 27}, User: "alice"},
		Cmd:         []string{"python", "train.py"},
		Dir:         "/home/alice",
		Env:         map[string]string{"K": "v"},
		VRAM:        api.VRAM{MiB: 4096},
		VRAMMiB:     4096,
		GPUs:        1,
		Timeout:     time.Hour,
		Retries:     2,
		RetriesLeft: 2,
		State:       state,
		SubmittedAt: t0,
	}
}

// named is one queued spec per name.
func named(names ...string) []*jobqueue.Job {
	out := make([]*jobqueue.Job, len(names))
	for i, n := range names {
		out[i] = spec(n, api.JobQueued)
	}
	return out
}

// harness is a queue over a fresh store dir that records what it publishes.
type harness struct {
	dir     string
	q       *jobqueue.Queue
	changes []jobqueue.Change // appended under the queue's lock
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{dir: filepath.Join(t.TempDir(), "jobs")}
	st, err := store.OpenRecords(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	h.q = jobqueue.New(st, func(c jobqueue.Change) { h.changes = append(h.changes, c) })
	return h
}

func (h *harness) add(t *testing.T, jobs ...*jobqueue.Job) []*jobqueue.Job {
	t.Helper()
	out, err := h.q.Add(jobs)
	if err != nil {
		t.Fatalf("Add: %v", err)
	}
	return out
}

func (h *harness) setState(t *testing.T, id string, s api.JobState) *jobqueue.Job {
	t.Helper()
	j, err := h.q.Update(id, func(j *jobqueue.Job) error { j.State = s; return nil })
	if err != nil {
		t.Fatalf("Update %s: %v", id, err)
	}
	return j
}

// reopen is a second queue loaded from the same store dir, as after a
// daemon restart.
func (h *harness) reopen(t *testing.T) *jobqueue.Queue {
	t.Helper()
	st, err := store.OpenRecords(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(st, nil)
	problems, err := q.Load()
	if err != nil || len(problems) > 0 {
		t.Fatalf("Load: %v, problems %+v", err, problems)
	}
	return q
}

// dirState is every file under dir with its content.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// snapshot is a job's JSON, to compare a published job before and after.
func snapshot(t *testing.T, j *jobqueue.Job) string {
	t.Helper()
	b, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// idNames is "id name" per job.
func idNames(jobs []*jobqueue.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID + " " + j.Name
	}
	return out
}

func TestAddAssignsIDsAndNames(t *testing.T) {
	cases := []struct {
		name  string
		pre   [][]string // batches added first
		batch []string
		want  []string // "id name" of the batch's jobs, in order
	}{
		{name: "unnamed", batch: []string{"", "", ""}, want: []string{"j1 job-1", "j2 job-2", "j3 job-3"}},
		{name: "mixed", batch: []string{"a", "", "b", ""}, want: []string{"j1 a", "j2 job-2", "j3 b", "j4 job-4"}},
		{name: "own id as name", batch: []string{"", "j2"}, want: []string{"j1 job-1", "j2 j2"}},
		{name: "after earlier batches", pre: [][]string{{"x", ""}, {"y"}}, batch: []string{"", "z"}, want: []string{"j4 job-4", "j5 z"}},
		{name: "empty batch", pre: [][]string{{"x"}}, batch: nil, want: []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, b := range tc.pre {
				h.add(t, named(b...)...)
			}
			before := len(h.q.View())
			in := named(tc.batch...)
			out := h.add(t, in...)
			if got := idNames(out); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("added %q, want %q", got, tc.want)
			}
			view := h.q.View()
			if len(view) != before+len(out) {
				t.Fatalf("view has %d jobs, want %d", len(view), before+len(out))
			}
			changes := h.changes[len(h.changes)-len(out):]
			for i, j := range out {
				if j.Seq != uint64(before+i+1) || j.Rev != 1 {
					t.Errorf("%s: seq %d rev %d, want seq %d rev 1", j.ID, j.Seq, j.Rev, before+i+1)
				}
				if view[before+i] != j {
					t.Errorf("view[%d] is not the added %s", before+i, j.ID)
				}
				if c := changes[i]; c.Old != nil || c.New != j {
					t.Errorf("change %d = %+v, want {nil, %s}", i, c, j.ID)
				}
				if got, ok := h.q.Get(j.ID); !ok || got != j {
					t.Errorf("Get(%q) = %v, %v; want %s", j.ID, got, ok, j.ID)
				}
				if got, ok := h.q.Owned(j.Owner.UID, j.Name); !ok || got != j {
					t.Errorf("Owned(%q) = %v, %v; want %s", j.Name, got, ok, j.ID)
				}
				if _, err := os.Stat(filepath.Join(h.dir, j.ID+".json")); err != nil {
					t.Errorf("record of %s: %v", j.ID, err)
				}
				// Add queues copies: the caller's specs are untouched and
				// changing them later changes nothing queued.
				if in[i].ID != "" || in[i].Seq != 0 || in[i].Rev != 0 || in[i].Name != tc.batch[i] {
					t.Errorf("Add changed its input: %+v", in[i])
				}
				in[i].Cmd[0], in[i].Env["K"] = "changed", "changed"
				if j.Cmd[0] != "python" || j.Env["K"] != "v" {
					t.Errorf("%s shares its input's slices or maps", j.ID)
				}
			}
		})
	}
}

func TestAddRefusesWholeBatch(t *testing.T) {
	cases := []struct {
		name  string
		pre   []*jobqueue.Job // added (one batch each) before the refused batch
		batch []*jobqueue.Job
	}{
		{name: "duplicate name in batch", batch: named("a", "b", "a")},
		{name: "unnamed job's default name given to another", batch: named("job-2", "")},
		{name: "name of a queued job", pre: named("train"), batch: named("ok", "train")},
		{name: "name of a starting job", pre: []*jobqueue.Job{spec("train", api.JobStarting)}, batch: named("ok", "train")},
		{name: "name of a running job", pre: []*jobqueue.Job{spec("train", api.JobRunning)}, batch: named("train")},
		{name: "name of a preempted job", pre: []*jobqueue.Job{spec("train", api.JobPreempted)}, batch: named("train")},
		{name: "newest of a reused name unfinished", pre: []*jobqueue.Job{spec("train", api.JobDone), spec("train", api.JobQueued)}, batch: named("train")},
		{name: "id form not its own id", batch: named("j7")},
		{name: "id of another job in the batch", batch: named("", "j1")},
		{name: "id of an existing finished job", pre: []*jobqueue.Job{spec("a", api.JobDone)}, batch: named("j1")},
		{name: "first id of the batch on its second job", pre: named("x"), batch: named("ok", "j2")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for _, j := range tc.pre {
				h.add(t, j)
			}
			files := dirState(t, h.dir)
			view := h.q.View()
			nChanges := len(h.changes)

			out, err := h.q.Add(tc.batch)
			if !errors.Is(err, jobqueue.ErrExists) || out != nil {
				t.Fatalf("Add = %v, %v; want nil, ErrExists", idNames(out), err)
			}
			if got := dirState(t, h.dir); !reflect.DeepEqual(got, files) {
				t.Errorf("store dir changed:\n got %v\nwant %v", got, files)
			}
			if got := h.q.View(); !reflect.DeepEqual(got, view) {
				t.Errorf("view changed: %v, was %v", idNames(got), idNames(view))
			}
			if len(h.changes) != nChanges {
				t.Errorf("published %d changes for a refused batch", len(h.changes)-nChanges)
			}
			for _, j := range tc.batch {
				if j.Name == "ok" || j.Name == "a" || j.Name == "b" {
					if _, ok := h.q.Get(j.Name); ok {
						t.Errorf("%q of the refused batch is queued", j.Name)
					}
				}
			}
			// The refused batch used no sequence numbers.
			next := h.add(t, spec("after", api.JobQueued))[0]
			if want := fmt.Sprintf("j%d", len(tc.pre)+1); next.ID != want {
				t.Errorf("next job is %s, want %s", next.ID, want)
			}
		})
	}
}

func TestAddReusesFinishedName(t *testing.T) {
	for _, end := range []api.JobState{api.JobDone, api.JobFailed, api.JobTimedOut, api.JobCancelled, api.JobInfeasible} {
		t.Run(string(end), func(t *testing.T) {
			h := newHarness(t)
			h.add(t, named("train", "other")...)
			old := h.setState(t, "j1", end)
			nu := h.add(t, spec("train", api.JobQueued))[0]
			if nu.ID != "j3" {
				t.Fatalf("reused name got id %s, want j3", nu.ID)
			}
			if got, ok := h.q.Owned(1000, "train"); !ok || got != nu {
				t.Errorf("Owned(train) = %v, %v; want the newest, %s", got, ok, nu.ID)
			}
			for id, want := range map[string]*jobqueue.Job{"j3": nu, "j1": old} {
				if got, ok := h.q.Get(id); !ok || got != want {
					t.Errorf("Get(%q) = %v, %v; want %s", id, got, ok, want.ID)
				}
			}
			if old.Name != "train" || old.State != end {
				t.Errorf("old job changed: %+v", old)
			}
			// The name is held again while its newest job is unfinished.
			if _, err := h.q.Add(named("train")); !errors.Is(err, jobqueue.ErrExists) {
				t.Errorf("third train while j3 is queued: %v, want ErrExists", err)
			}
			// After a restart the newest still wins.
			q2 := h.reopen(t)
			if got, ok := q2.Owned(1000, "train"); !ok || got.ID != "j3" {
				t.Errorf("after Load Get(train) = %v, %v; want j3", got, ok)
			}
			if got, ok := q2.Get("j1"); !ok || got.Name != "train" || got.State != end {
				t.Errorf("after Load Get(j1) = %+v, %v", got, ok)
			}
		})
	}
}

// TestNamesPerOwner: job names are per owner. Two owners' unfinished jobs
// of one name are two jobs, each found by its owner's name; one owner's
// second unfinished job of a name is refused; Get finds by id only.
func TestNamesPerOwner(t *testing.T) {
	h := newHarness(t)
	bob := spec("train", api.JobQueued)
	bob.Owner = jobqueue.Owner{UID: 1001, GID: 1001, User: "bob"}
	h.add(t, spec("train", api.JobQueued))
	h.add(t, bob)
	if _, err := h.q.Add([]*jobqueue.Job{spec("train", api.JobQueued)}); !errors.Is(err, jobqueue.ErrExists) {
		t.Fatalf("alice's second unfinished train: %v, want ErrExists", err)
	}
	for uid, want := range map[uint32]string{1000: "j1", 1001: "j2"} {
		if j, ok := h.q.Owned(uid, "train"); !ok || j.ID != want {
			t.Errorf("Owned(%d, train) = %v, %v; want %s", uid, j, ok, want)
		}
	}
	if _, ok := h.q.Owned(1002, "train"); ok {
		t.Error("a third owner finds a train")
	}
	if _, ok := h.q.Get("train"); ok {
		t.Error("Get found a job by name")
	}
	q2 := h.reopen(t)
	if j, ok := q2.Owned(1001, "train"); !ok || j.ID != "j2" {
		t.Errorf("after Load, Owned(1001, train) = %v, %v", j, ok)
	}
}

func TestUpdatePersistsBumpsRevAndPublishes(t *testing.T) {
	h := newHarness(t)
	added := h.add(t, named("a", "b")...)
	steps := []struct {
		id string
		fn func(*jobqueue.Job)
	}{
		{"j1", func(j *jobqueue.Job) {
			j.State, j.Proc = api.JobStarting, "p1"
			j.Attempts = append(j.Attempts, api.Attempt{N: 1, GPUs: []string{"GPU-0"}, VRAMMiB: 4096, StartedAt: t0.Add(time.Minute), PeakMiB: map[string]uint64{}})
		}},
		{"j2", func(j *jobqueue.Job) { j.Priority = 5 }},
		{"j1", func(j *jobqueue.Job) {
			j.State = api.JobDone
			j.EndedAt = t0.Add(time.Hour)
			a := j.Current()
			a.EndedAt, a.Exit, a.Outcome = j.EndedAt, &api.Exit{Code: ptr(0)}, "done"
			a.PeakMiB["GPU-0"] = 3000
			a.PreemptedFor = api.Duration(time.Minute)
			j.Verdict = jobqueue.Verdict(j.VRAMMiB, jobqueue.MaxPeak(j.Peak()))
		}},
	}
	wantRev := map[string]uint64{"j1": 1, "j2": 1}
	last := map[string]*jobqueue.Job{"j1": added[0], "j2": added[1]}
	for i, s := range steps {
		nChanges := len(h.changes)
		got, err := h.q.Update(s.id, func(j *jobqueue.Job) error { s.fn(j); return nil })
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		wantRev[s.id]++
		if got.Rev != wantRev[s.id] {
			t.Errorf("step %d: rev %d, want %d", i, got.Rev, wantRev[s.id])
		}
		if len(h.changes) != nChanges+1 {
			t.Fatalf("step %d published %d changes, want 1", i, len(h.changes)-nChanges)
		}
		if c := h.changes[nChanges]; c.Old != last[s.id] || c.New != got {
			t.Errorf("step %d published {%p, %p}, want {%p, %p}", i, c.Old, c.New, last[s.id], got)
		}
		if j, _ := h.q.Get(s.id); j != got {
			t.Errorf("step %d: Get(%s) is not the updated job", i, s.id)
		}
		last[s.id] = got
	}
	if got, want := len(h.changes), 2+len(steps); got != want {
		t.Errorf("%d changes in all, want %d", got, want)
	}

	q2 := h.reopen(t)
	if got, want := q2.View(), h.q.View(); !reflect.DeepEqual(got, want) {
		t.Errorf("after Load:\n got %s\nwant %s", jsonOf(t, got), jsonOf(t, want))
	}
	// The re-opened queue goes on from the loaded revisions.
	j, err := q2.Update("j1", func(j *jobqueue.Job) error { return nil })
	if err != nil || j.Rev != 4 {
		t.Errorf("update after Load: rev %v, %v; want 4", j, err)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestUpdateRefused(t *testing.T) {
	errFn := errors.New("not now")
	cases := []struct {
		name string
		id   string
		fn   func(*jobqueue.Job) error
		is   error // the error must match, when set
	}{
		{name: "unknown id", id: "j9", fn: func(*jobqueue.Job) error { return nil }, is: jobqueue.ErrNotFound},
		{name: "by name", id: "a", fn: func(*jobqueue.Job) error { return nil }, is: jobqueue.ErrNotFound},
		{name: "fn error after changing its copy", id: "j1", is: errFn, fn: func(j *jobqueue.Job) error {
			j.State, j.Cmd[0], j.Env["K"], j.Owner.Groups[0] = api.JobRunning, "x", "x", 0
			j.Attempts = append(j.Attempts, api.Attempt{N: 1})
			return errFn
		}},
		{name: "id change", id: "j1", fn: func(j *jobqueue.Job) error { j.ID = "j2"; return nil }},
		{name: "seq change", id: "j1", fn: func(j *jobqueue.Job) error { j.Seq = 7; return nil }},
		{name: "name change", id: "j1", fn: func(j *jobqueue.Job) error { j.Name = "b"; return nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.add(t, named("a", "c")...)
			files := dirState(t, h.dir)
			view := h.q.View()
			before := snapshot(t, view[0])
			nChanges := len(h.changes)

			j, err := h.q.Update(tc.id, tc.fn)
			if err == nil || j != nil {
				t.Fatalf("Update = %v, %v; want an error", j, err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v, want %v", err, tc.is)
			}
			if got := dirState(t, h.dir); !reflect.DeepEqual(got, files) {
				t.Errorf("store dir changed:\n got %v\nwant %v", got, files)
			}
			if got := h.q.View(); !reflect.DeepEqual(got, view) {
				t.Errorf("view changed")
			}
			if got := snapshot(t, view[0]); got != before {
				t.Errorf("job changed:\n got %s\nwant %s", got, before)
			}
			if cur, _ := h.q.Get("j1"); cur != view[0] || cur.Rev != 1 {
				t.Errorf("Get(j1) = rev %d, not the published job", cur.Rev)
			}
			if len(h.changes) != nChanges {
				t.Errorf("published %d changes", len(h.changes)-nChanges)
			}
		})
	}
}

func TestViewInSeqOrder(t *testing.T) {
	h := newHarness(t)
	h.add(t, named("", "", "")...)
	h.add(t, named("a", "b", "c", "d", "e", "f", "g", "h", "i")...) // j4..j12: j10 sorts before j2 as a file name
	for _, id := range []string{"j12", "j1", "j7", "j10", "j2", "j7"} {
		h.setState(t, id, api.JobRunning)
	}
	check := func(t *testing.T, q *jobqueue.Queue) {
		t.Helper()
		view := q.View()
		if len(view) != 12 {
			t.Fatalf("view has %d jobs, want 12", len(view))
		}
		for i, j := range view {
			if j.Seq != uint64(i+1) || j.ID != fmt.Sprintf("j%d", i+1) {
				t.Errorf("view[%d] = %s seq %d", i, j.ID, j.Seq)
			}
			if cur, _ := q.Get(j.ID); cur != j {
				t.Errorf("view[%d] is not the current %s", i, j.ID)
			}
		}
		if j := view[6]; j.Rev != 3 || j.State != api.JobRunning {
			t.Errorf("j7 in view: rev %d state %s, want rev 3 running", j.Rev, j.State)
		}
	}
	t.Run("live", func(t *testing.T) { check(t, h.q) })
	t.Run("loaded", func(t *testing.T) { check(t, h.reopen(t)) })
}

// rich is a job with every reference-typed field set, so that sharing any
// of them between published copies shows.
func rich() *jobqueue.Job {
	j := spec("rich", api.JobRunning)
	j.Attempts = []api.Attempt{
		{N: 1, GPUs: []string{"GPU-0", "GPU-1"}, StartedAt: t0, EndedAt: t0.Add(time.Minute), PeakMiB: map[string]uint64{"GPU-0": 100}, Exit: &api.Exit{Code: ptr(1)}, OOM: true},
		{N: 2, GPUs: []string{"GPU-0"}, StartedAt: t0.Add(2 * time.Minute), PeakMiB: map[string]uint64{"GPU-0": 200}},
	}
	return j
}

func TestPublishedJobsAreNeverMutated(t *testing.T) {
	mutations := []struct {
		name string
		fn   func(*jobqueue.Job)
	}{
		{"cmd", func(j *jobqueue.Job) { j.Cmd[0] = "evil" }},
		{"env", func(j *jobqueue.Job) { j.Env["K"] = "evil"; j.Env["NEW"] = "x" }},
		{"groups", func(j *jobqueue.Job) { j.Owner.Groups[0] = 0 }},
		{"attempt gpus", func(j *jobqueue.Job) { j.Attempts[0].GPUs[1] = "GPU-9" }},
		{"attempt peaks", func(j *jobqueue.Job) { j.Attempts[0].PeakMiB["GPU-0"] = 999; j.Current().PeakMiB["GPU-1"] = 5 }},
		{"attempt exit code", func(j *jobqueue.Job) { *j.Attempts[0].Exit.Code = 137 }},
		{"attempt exit", func(j *jobqueue.Job) { j.Attempts[0].Exit.Signal = "SIGKILL" }},
		{"attempt in place", func(j *jobqueue.Job) { j.Current().Outcome = "done" }},
		{"attempts appended", func(j *jobqueue.Job) { j.Attempts = append(j.Attempts[:1], api.Attempt{N: 9}) }},
		{"scalars", func(j *jobqueue.Job) { j.State, j.VRAMMiB, j.Reason = api.JobDone, 1, "r" }},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t)
			in := rich()
			added := h.add(t, in)[0]
			viewed := h.q.View()[0]
			if viewed != added {
				t.Fatal("view does not hold the added job")
			}
			was := snapshot(t, viewed)

			// Mutating the spec after Add must not reach the queued job.
			m.fn(in)
			if got := snapshot(t, viewed); got != was {
				t.Fatalf("mutating Add's input changed the queued job:\n got %s\nwant %s", got, was)
			}

			// Update's callback gets a deep copy; what it changes is in
			// the new job only.
			first, err := h.q.Update(added.ID, func(j *jobqueue.Job) error { m.fn(j); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if got := snapshot(t, viewed); got != was {
				t.Fatalf("Update changed the previously viewed job:\n got %s\nwant %s", got, was)
			}
			if c := h.changes[len(h.changes)-1]; c.Old != viewed || snapshot(t, c.Old) != was {
				t.Error("the change's Old is not the unchanged previous job")
			}
			firstWas := snapshot(t, first)

			// Nor does a later Update, even one that mutates the same
			// fields again, or anyone holding the earlier callback's copy.
			if _, err := h.q.Update(added.ID, func(j *jobqueue.Job) error { m.fn(j); j.Cmd[0] = "again"; return nil }); err != nil {
				t.Fatal(err)
			}
			if got := snapshot(t, first); got != firstWas {
				t.Errorf("a later Update changed the job an earlier one returned:\n got %s\nwant %s", got, firstWas)
			}
			if got := snapshot(t, viewed); got != was {
				t.Errorf("a later Update changed the first viewed job")
			}
		})
	}
}

// TestConcurrentReadersSeeImmutableJobs reads and encodes published jobs
// while others update them; under -race any write to a published job shows.
func TestConcurrentReadersSeeImmutableJobs(t *testing.T) {
	q := newHarness(t).q
	jobs := []*jobqueue.Job{rich(), rich(), rich(), rich()}
	for i, j := range jobs {
		j.Name = fmt.Sprintf("r%d", i)
	}
	if _, err := q.Add(jobs); err != nil {
		t.Fatal(err)
	}
	const updates = 20
	var writers, readers sync.WaitGroup
	done := make(chan struct{})
	for i := range jobs {
		id := fmt.Sprintf("j%d", i+1)
		writers.Go(func() {
			for n := range updates {
				_, err := q.Update(id, func(j *jobqueue.Job) error {
					j.Cmd[0] = fmt.Sprint(n)
					j.Env["N"] = fmt.Sprint(n)
					j.Attempts[0].PeakMiB["GPU-0"] = uint64(n)
					j.Attempts = append(j.Attempts, api.Attempt{N: n})
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 2 {
		readers.Go(func() {
			for {
				for _, j := range q.View() {
					if _, err := json.Marshal(j); err != nil {
						t.Error(err)
					}
					_ = jobqueue.MaxPeak(j.Peak())
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	writers.Wait()
	close(done)
	readers.Wait()
	for _, j := range q.View() {
		if j.Rev != 1+updates || len(j.Attempts) != 2+updates {
			t.Errorf("%s: rev %d with %d attempts", j.ID, j.Rev, len(j.Attempts))
		}
	}
}

// TestFailedWriteChangesNothing: when the store cannot be written, Add and
// Update leave the queue as it was and use up no sequence number.
func TestFailedWriteChangesNothing(t *testing.T) {
	cases := []struct {
		name string
		op   func(q *jobqueue.Queue) error
	}{
		{"add", func(q *jobqueue.Queue) error { _, err := q.Add(named("x", "")); return err }},
		{"update", func(q *jobqueue.Queue) error {
			_, err := q.Update("j1", func(j *jobqueue.Job) error { j.State = api.JobRunning; return nil })
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.add(t, named("a")...)
			view := h.q.View()
			was := snapshot(t, view[0])
			nChanges := len(h.changes)
			if err := os.RemoveAll(h.dir); err != nil {
				t.Fatal(err)
			}
			if err := tc.op(h.q); err == nil {
				t.Fatal("no error with the store dir gone")
			}
			if got := h.q.View(); !reflect.DeepEqual(got, view) || snapshot(t, got[0]) != was {
				t.Error("the queue changed")
			}
			if len(h.changes) != nChanges {
				t.Errorf("published %d changes", len(h.changes)-nChanges)
			}
			if err := os.Mkdir(h.dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if j := h.add(t, spec("", api.JobQueued))[0]; j.ID != "j2" {
				t.Errorf("next job is %s, want j2", j.ID)
			}
			if j, _ := h.q.Get("j1"); j.Rev != 1 || j.State != api.JobQueued {
				t.Errorf("j1 is rev %d %s", j.Rev, j.State)
			}
		})
	}
}

func TestIsID(t *testing.T) {
	cases := []struct {
		s    string
		want bool
	}{
		{"j1", true},
		{"j0", true},
		{"j01", true},
		{"j18446744073709551615", true},
		{"", false},
		{"j", false},
		{"1", false},
		{"J1", false},
		{"j1a", false},
		{"j-1", false},
		{"jx", false},
		{"job-1", false},
		{" j1", false},
		{"j1 ", false},
		{"j١", false}, // an Arabic-Indic digit is not a digit here
	}
	for _, tc := range cases {
		t.Run(tc.s, func(t *testing.T) {
			if got := jobqueue.IsID(tc.s); got != tc.want {
				t.Errorf("IsID(%q) = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

// TestAddWithin: admit sees, per owner of the batch, its unfinished jobs
// (not finished ones, not other owners') and how many the batch adds; its
// refusal queues none of the batch.
func TestAddWithin(t *testing.T) {
	h := newHarness(t)
	done := h.add(t, named("a1", "a2", "a3")...)
	h.setState(t, done[0].ID, api.JobDone)
	bob := spec("b1", api.JobQueued)
	bob.Owner = jobqueue.Owner{UID: 1001, User: "bob"}
	h.add(t, bob)
	changes := len(h.changes)

	type ask struct{ uid, unfinished, adding int }
	var asked []ask
	refuse := errors.New("over the cap")
	batch := append(named("a4", "a5"), spec("b2", api.JobQueued))
	batch[2].Owner = bob.Owner
	_, err := h.q.AddWithin(batch, func(uid uint32, unfinished, adding int) error {
		asked = append(asked, ask{int(uid), unfinished, adding})
		if uid == 1001 {
			return refuse
		}
		return nil
	})
	if !errors.Is(err, refuse) {
		t.Fatalf("AddWithin = %v, want the refusal", err)
	}
	if want := []ask{{1000, 2, 2}, {1001, 1, 1}}; !reflect.DeepEqual(asked, want) {
		t.Errorf("admit asked %v, want %v", asked, want)
	}
	if _, ok := h.q.Owned(1000, "a4"); ok || len(h.q.View()) != 4 || len(h.changes) != changes {
		t.Fatalf("a refused batch changed the queue: %d jobs, %d changes", len(h.q.View()), len(h.changes)-changes)
	}
}
