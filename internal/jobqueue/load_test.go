package jobqueue_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// record is a valid persisted job with id j<seq>.
func record(seq uint64, name string) *jobqueue.Job {
	j := spec(name, api.JobQueued)
	j.ID, j.Seq, j.Rev = "j"+strconv.FormatUint(seq, 10), seq, 1
	return j
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadQuarantinesBadRecordsAndContinuesSequence(t *testing.T) {
	h := newHarness(t)
	h.add(t, named("a", "", "c")...) // j1..j3
	h.setState(t, "j2", api.JobDone)
	st, err := store.OpenRecords(h.dir)
	if err != nil {
		t.Fatal(err)
	}
	// j5 is valid and leaves a gap: the next job is j6, not j4.
	if err := st.Put("j5", record(5, "e")); err != nil {
		t.Fatal(err)
	}
	const corrupt = `{"id":"j10","seq":10,`
	writeFile(t, filepath.Join(h.dir, "j10.json"), corrupt)
	// j7.json holds j6: its id does not match its key.
	if err := st.Put("j7", record(6, "f")); err != nil {
		t.Fatal(err)
	}
	mismatched, err := os.ReadFile(filepath.Join(h.dir, "j7.json"))
	if err != nil {
		t.Fatal(err)
	}

	nChanges := 0
	q := jobqueue.New(st, func(jobqueue.Change) { nChanges++ })
	problems, err := q.Load()
	if err != nil {
		t.Fatal(err)
	}

	wantQuarantined := map[string]string{"j10": corrupt, "j7": string(mismatched)}
	if len(problems) != len(wantQuarantined) {
		t.Fatalf("problems %+v, want one each for %v", problems, wantQuarantined)
	}
	for _, p := range problems {
		want, ok := wantQuarantined[p.Key]
		if !ok || p.Err == nil {
			t.Errorf("problem %+v", p)
			continue
		}
		if filepath.Dir(p.Quarantine) != filepath.Join(h.dir, "quarantine") {
			t.Errorf("%s quarantined to %s, not under quarantine/", p.Key, p.Quarantine)
		}
		if b, err := os.ReadFile(p.Quarantine); err != nil || string(b) != want {
			t.Errorf("%s in quarantine: %q, %v; want %q", p.Key, b, err, want)
		}
		if _, err := os.Stat(filepath.Join(h.dir, p.Key+".json")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s.json is still in the store", p.Key)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "quarantine")); len(ents) != 2 {
		t.Errorf("quarantine holds %d files, want 2", len(ents))
	}

	if got, want := idNames(q.View()), []string{"j1 a", "j2 job-2", "j3 c", "j5 e"}; !reflect.DeepEqual(got, want) {
		t.Errorf("loaded %q, want %q", got, want)
	}
	if j, _ := q.Owned(1000, "job-2"); j == nil || j.State != api.JobDone || j.Rev != 2 {
		t.Errorf("j2 loaded as %+v", j)
	}
	if _, ok := q.Owned(1000, "f"); ok {
		t.Error("the quarantined job f was loaded")
	}
	if nChanges != 0 {
		t.Errorf("Load published %d changes", nChanges)
	}

	added, err := q.Add(named("", "g"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idNames(added), []string{"j6 job-6", "j7 g"}; !reflect.DeepEqual(got, want) {
		t.Errorf("added after Load %q, want %q", got, want)
	}
	// A name loaded from an unfinished job is held.
	if _, err := q.Add(named("a")); err == nil {
		t.Error("a second unfinished job named a was queued after Load")
	}
	// Quarantine is not a record: a second Load of the store finds no problem.
	q2 := h.reopen(t)
	if got, want := idNames(q2.View()), []string{"j1 a", "j2 job-2", "j3 c", "j5 e", "j6 job-6", "j7 g"}; !reflect.DeepEqual(got, want) {
		t.Errorf("reloaded %q, want %q", got, want)
	}
}

func TestLoadValidates(t *testing.T) {
	cases := []struct {
		name string
		key  string
		mod  func(*jobqueue.Job)
		raw  string // written as is instead of the record, when set
	}{
		{name: "not json", key: "j2", raw: "not json"},
		{name: "empty file", key: "j2", raw: ""},
		{name: "wrong type", key: "j2", raw: `{"id":"j2","seq":"two"}`},
		{name: "id not its key", key: "j2", mod: func(j *jobqueue.Job) { j.ID = "j3" }},
		{name: "no sequence number", key: "j2", mod: func(j *jobqueue.Job) { j.Seq = 0 }},
		{name: "bad name", key: "j2", mod: func(j *jobqueue.Job) { j.Name = "a b" }},
		{name: "empty name", key: "j2", mod: func(j *jobqueue.Job) { j.Name = "" }},
		{name: "empty command", key: "j2", mod: func(j *jobqueue.Job) { j.Cmd = nil }},
		{name: "no GPUs", key: "j2", mod: func(j *jobqueue.Job) { j.GPUs = 0 }},
		{name: "no state", key: "j2", mod: func(j *jobqueue.Job) { j.State = "" }},
		{name: "oom_score_adj out of range", key: "j2", mod: func(j *jobqueue.Job) { j.OOMScoreAdj = -1001 }},
		{name: "id not j<seq>", key: "j3", mod: func(j *jobqueue.Job) { j.ID = "j3" }},
		{name: "key not an id", key: "x", mod: func(j *jobqueue.Job) { j.ID = "x" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "jobs")
			st, err := store.OpenRecords(dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Put("j1", record(1, "good")); err != nil {
				t.Fatal(err)
			}
			if tc.raw != "" || tc.mod == nil {
				writeFile(t, filepath.Join(dir, tc.key+".json"), tc.raw)
			} else {
				j := record(2, "bad")
				tc.mod(j)
				if err := st.Put(tc.key, j); err != nil {
					t.Fatal(err)
				}
			}
			q := jobqueue.New(st, nil)
			problems, err := q.Load()
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 1 || problems[0].Key != tc.key || problems[0].Err == nil || problems[0].Quarantine == "" {
				t.Fatalf("problems %+v, want one for %s", problems, tc.key)
			}
			if got := idNames(q.View()); !reflect.DeepEqual(got, []string{"j1 good"}) {
				t.Errorf("loaded %q", got)
			}
			if keys, _ := st.Keys(); !reflect.DeepEqual(keys, []string{"j1"}) {
				t.Errorf("store keys after Load: %v", keys)
			}
		})
	}
}

func TestLoadEmptyAndMissingStore(t *testing.T) {
	t.Run("empty", func(t *testing.T) {
		h := newHarness(t)
		problems, err := h.q.Load()
		if err != nil || len(problems) != 0 || len(h.q.View()) != 0 {
			t.Fatalf("Load = %v, %v; view %d", problems, err, len(h.q.View()))
		}
		if j := h.add(t, spec("", api.JobQueued))[0]; j.ID != "j1" {
			t.Errorf("first job of an empty store is %s", j.ID)
		}
	})
	t.Run("store dir gone", func(t *testing.T) {
		h := newHarness(t)
		if err := os.RemoveAll(h.dir); err != nil {
			t.Fatal(err)
		}
		if _, err := h.q.Load(); err == nil {
			t.Fatal("Load of a missing store dir succeeded")
		}
	})
}

// TestLoadKeepsAddFromOverwriting: a record j3 holding sequence number 2
// would make the queue's next Add (j3) overwrite it; Load quarantines it.
func TestLoadKeepsAddFromOverwriting(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	st, err := store.OpenRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := record(2, "old")
	bad.ID = "j3"
	if err := st.Put("j1", record(1, "a")); err != nil {
		t.Fatal(err)
	}
	if err := st.Put("j3", bad); err != nil {
		t.Fatal(err)
	}
	q := jobqueue.New(st, nil)
	problems, err := q.Load()
	if err != nil || len(problems) != 1 || problems[0].Key != "j3" {
		t.Fatalf("Load = %+v, %v; want j3 quarantined", problems, err)
	}
	added, err := q.Add(named("b", "c"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idNames(added), []string{"j2 b", "j3 c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("added %q, want %q", got, want)
	}
	var kept jobqueue.Job
	if err := readJSON(problems[0].Quarantine, &kept); err != nil || kept.Name != "old" {
		t.Errorf("quarantined record: %+v, %v", kept, err)
	}
	if got := idNames(q.View()); !reflect.DeepEqual(got, []string{"j1 a", "j2 b", "j3 c"}) {
		t.Errorf("view %q", got)
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func TestLoadQuarantineFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs")
	st, err := store.OpenRecords(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Put("j1", record(1, "good")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "j2.json"), "{")
	writeFile(t, filepath.Join(dir, "quarantine"), "a file where the quarantine dir goes")
	q := jobqueue.New(st, nil)
	problems, err := q.Load()
	if err != nil {
		t.Fatal(err)
	}
	// Still reported and skipped, never blocking the load.
	if len(problems) != 1 || problems[0].Key != "j2" || problems[0].Quarantine != "" ||
		!strings.Contains(fmt.Sprint(problems[0].Err), "quarantine failed") {
		t.Fatalf("problems %+v", problems)
	}
	if got := idNames(q.View()); !reflect.DeepEqual(got, []string{"j1 good"}) {
		t.Errorf("loaded %q", got)
	}
}
