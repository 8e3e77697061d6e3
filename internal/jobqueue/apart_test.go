package jobqueue_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// openStore is a fresh job store.
func openStore(t *testing.T) *store.Records {
	t.Helper()
	st, err := store.OpenRecords(filepath.Join(t.TempDir(), "jobs"))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// bigSpec is a queued job of a 200 KiB command and a 20 KiB environment.
func bigSpec(name string) *jobqueue.Job {
	j := spec(name, api.JobQueued)
	j.Cmd = []string{"python", strings.Repeat("a", 100<<10), strings.Repeat("b", 100<<10)}
	j.Env = map[string]string{"BIG": strings.Repeat("e", 20<<10)}
	return j
}

func finish(t *testing.T, q *jobqueue.Queue, id string) *jobqueue.Job {
	t.Helper()
	j, err := q.Update(id, func(j *jobqueue.Job) error { j.State = api.JobDone; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// assertApart checks that j keeps its command cut and no environment, and
// that q gives the whole command back.
func assertApart(t *testing.T, q *jobqueue.Queue, j *jobqueue.Job, cmd []string) {
	t.Helper()
	b, _ := json.Marshal(j.Cmd)
	if !j.Apart || !j.CmdTruncated || len(b) > api.ListCmdBytes || j.Env != nil {
		t.Fatalf("finished job keeps %d bytes of command (truncated %v) and %d variables, apart %v", len(b), j.CmdTruncated, len(j.Env), j.Apart)
	}
	whole, err := q.Command(j)
	if err != nil || !reflect.DeepEqual(whole, cmd) {
		t.Fatalf("Command: %d arguments, %v; want the whole command", len(whole), err)
	}
}

func TestFinishedJobKeepsItsCommandApart(t *testing.T) {
	st := openStore(t)
	q := jobqueue.New(st, nil)
	added, err := q.Add([]*jobqueue.Job{bigSpec("big"), spec("small", api.JobQueued)})
	if err != nil {
		t.Fatal(err)
	}
	big, small := added[0], added[1]
	if big.Apart || big.CmdTruncated || len(big.Env) != 1 {
		t.Fatalf("an unfinished job was cut: apart %v, truncated %v", big.Apart, big.CmdTruncated)
	}
	running, err := q.Update(big.ID, func(j *jobqueue.Job) error { j.State = api.JobRunning; return nil })
	if err != nil || running.Apart || len(running.Env) != 1 {
		t.Fatalf("a running job was cut: %v, %v", running.Apart, err)
	}
	assertApart(t, q, finish(t, q, big.ID), bigSpec("").Cmd)
	if fi, err := os.Stat(filepath.Join(st.Dir(), big.ID+".json")); err != nil || fi.Size() > 3*api.ListCmdBytes {
		t.Fatalf("the finished job's record: %v bytes (%v)", fi.Size(), err)
	}
	if _, err := q.Update(big.ID, func(j *jobqueue.Job) error { j.State = api.JobQueued; return nil }); err == nil {
		t.Fatal("a finished job whose command is kept apart was queued again")
	}
	if j := finish(t, q, small.ID); j.Apart || j.CmdTruncated || len(j.Env) != 1 {
		t.Fatalf("a small finished job was moved apart: %+v", j)
	}

	again := jobqueue.New(st, nil)
	if _, err := again.Load(); err != nil {
		t.Fatal(err)
	}
	loaded, _ := again.Get(big.ID)
	assertApart(t, again, loaded, bigSpec("").Cmd)
	if _, failed, err := again.RemoveAll([]string{big.ID}, "test", nil); err != nil || len(failed) > 0 {
		t.Fatal(failed, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(st.Dir(), "cmds")); len(ents) != 0 {
		t.Fatalf("%d files kept apart after the job was removed", len(ents))
	}
}

func TestLoadMovesAnOldFinishedJobApart(t *testing.T) {
	st := openStore(t)
	q := jobqueue.New(st, nil)
	added, err := q.Add([]*jobqueue.Job{bigSpec("old")})
	if err != nil {
		t.Fatal(err)
	}
	old := *added[0]
	old.State = api.JobFailed
	if err := st.Put(old.ID, &old); err != nil { // as written before finished jobs kept theirs cut
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(st.Dir(), "cmds"), 0o700)
	os.WriteFile(filepath.Join(st.Dir(), "cmds", "j999.json"), []byte(`{"cmd":["stray"]}`), 0o600)
	again := jobqueue.New(st, nil)
	if _, err := again.Load(); err != nil {
		t.Fatal(err)
	}
	loaded, _ := again.Get(old.ID)
	assertApart(t, again, loaded, bigSpec("").Cmd)
	if _, err := os.Stat(filepath.Join(st.Dir(), "cmds", "j999.json")); !os.IsNotExist(err) {
		t.Fatalf("a file without its job was kept (%v)", err)
	}
}
