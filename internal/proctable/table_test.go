package proctable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

func newTable(t *testing.T) (*Table, *store.Records, *[]Change) {
	t.Helper()
	st, err := store.OpenRecords(filepath.Join(t.TempDir(), "procs"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	changes := &[]Change{}
	tb := New(st, func(c Change) { mu.Lock(); *changes = append(*changes, c); mu.Unlock() })
	return tb, st, changes
}

func rec(name string, state api.State) Record {
	return Record{ID: "id-" + name + "-" + string(state), Name: name, Cmd: []string{"true"}, State: state, CreatedAt: time.Unix(100, 0)}
}

func TestCreateReplaceAndExists(t *testing.T) {
	tb, st, changes := newTable(t)
	if _, err := tb.Create(rec("a", api.StateRunning)); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Create(rec("a", api.StateStarting)); !errors.Is(err, ErrExists) {
		t.Fatalf("create over a live process: %v, want ErrExists", err)
	}
	if _, err := tb.Update(Key{Name: "a"}, func(r *Record) error { r.State = api.StateExited; return nil }); err != nil {
		t.Fatal(err)
	}
	repl := rec("a", api.StateStarting)
	if _, err := tb.Create(repl); err != nil {
		t.Fatalf("replace exited: %v", err)
	}
	keys, _ := st.Keys()
	if len(keys) != 1 || keys[0] != repl.ID {
		t.Fatalf("stored keys %v, want only %s", keys, repl.ID)
	}
	if got, _ := tb.Get(Key{Name: "a"}); got.ID != repl.ID || got.Rev != 1 {
		t.Fatalf("got %+v", got)
	}
	// create, update, remove of old, create of new
	kinds := ""
	for _, c := range *changes {
		switch {
		case c.Old == nil:
			kinds += "+"
		case c.New == nil:
			kinds += "-"
		default:
			kinds += "~"
		}
	}
	if kinds != "+~-+" {
		t.Fatalf("change kinds %q", kinds)
	}
	for i, c := range *changes {
		if c.Seq != uint64(i+1) {
			t.Fatalf("change %d has seq %d", i, c.Seq)
		}
	}
}

func TestUpdateTransitions(t *testing.T) {
	tests := []struct {
		from, to api.State
		ok       bool
	}{
		{api.StateStarting, api.StateRunning, true},
		{api.StateStarting, api.StateExited, true},
		{api.StateRunning, api.StateExited, true},
		{api.StateRunning, api.StateRunning, true},
		{api.StateRunning, api.StateStarting, false},
		{api.StateExited, api.StateRunning, false},
		{api.StateExited, api.StateStarting, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s->%s", tt.from, tt.to), func(t *testing.T) {
			tb, st, _ := newTable(t)
			r, _ := tb.Create(rec("p", tt.from))
			_, err := tb.Update(Key{Name: "p"}, func(r *Record) error { r.State = tt.to; return nil })
			var te *TransitionError
			if tt.ok != (err == nil) || !tt.ok && !errors.As(err, &te) {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			var disk Record
			if err := st.Get(r.ID, &disk); err != nil {
				t.Fatal(err)
			}
			want := tt.from
			if tt.ok {
				want = tt.to
			}
			if disk.State != want {
				t.Fatalf("persisted state %s, want %s", disk.State, want)
			}
		})
	}
}

func TestUpdateCallbackErrorChangesNothing(t *testing.T) {
	tb, _, changes := newTable(t)
	tb.Create(rec("p", api.StateRunning))
	n := len(*changes)
	_, err := tb.Update(Key{Name: "p"}, func(r *Record) error { r.PID = 9; return errors.New("no") })
	if err == nil || len(*changes) != n {
		t.Fatalf("err %v, changes %d -> %d", err, n, len(*changes))
	}
	if got, _ := tb.Get(Key{Name: "p"}); got.PID != 0 {
		t.Fatal("record changed")
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	tb, _, _ := newTable(t)
	r := rec("p", api.StateRunning)
	r.Cmd = []string{"a", "b"}
	tb.Create(r)
	before := tb.View()
	tb.Update(Key{Name: "p"}, func(r *Record) error { r.Cmd[0] = "changed"; r.PID = 5; return nil })
	old, _ := before.Get(Key{Name: "p"})
	if old.Cmd[0] != "a" || old.PID != 0 {
		t.Fatalf("old snapshot changed: %+v", old)
	}
}

func TestRemove(t *testing.T) {
	tb, st, _ := newTable(t)
	tb.Create(rec("p", api.StateRunning))
	busy := errors.New("still running")
	if _, err := tb.Remove(Key{Name: "p"}, func(r Record) error {
		if r.Live() {
			return busy
		}
		return nil
	}); !errors.Is(err, busy) {
		t.Fatalf("err %v", err)
	}
	if _, err := tb.Remove(Key{Name: "p"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Remove(Key{Name: "p"}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if keys, _ := st.Keys(); len(keys) != 0 {
		t.Fatalf("keys left: %v", keys)
	}
}

func TestLoadQuarantinesBadRecordsAndDuplicates(t *testing.T) {
	tb, st, _ := newTable(t)
	good := rec("good", api.StateRunning)
	good.CPUs = "2-5,8"
	tb.Create(good)
	older := rec("dup", api.StateExited)
	older.ID = "dup-old"
	newer := rec("dup", api.StateExited)
	newer.ID = "dup-new"
	newer.CreatedAt = older.CreatedAt.Add(time.Second)
	st.Put(older.ID, older)
	st.Put(newer.ID, newer)
	os.WriteFile(filepath.Join(st.Dir(), "garbage.json"), []byte("{not json"), 0o600)
	evil := rec("../etc", api.StateRunning)
	evil.ID = "evil"
	st.Put(evil.ID, evil)
	mismatch := rec("m", api.StateRunning)
	st.Put("other-key", mismatch)
	badCPUs := rec("cpus", api.StateRunning)
	badCPUs.CPUs = "2-1"
	st.Put(badCPUs.ID, badCPUs)
	badOOM := rec("oom", api.StateRunning)
	badOOM.OOMScoreAdj = 1001
	st.Put(badOOM.ID, badOOM)

	tb2 := New(st, nil)
	problems, err := tb2.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 6 {
		t.Fatalf("problems %+v, want 6 (garbage, evil name, key mismatch, CPUs, oom_score_adj, duplicate)", problems)
	}
	v := tb2.View()
	if len(v.Records) != 2 || v.Records[0].ID != newer.ID || v.Records[1].ID != good.ID || v.Records[1].CPUs != good.CPUs {
		t.Fatalf("loaded %+v", v.Records)
	}
	keys, _ := st.Keys()
	if len(keys) != 2 {
		t.Fatalf("keys after load %v", keys)
	}
	q, _ := os.ReadDir(filepath.Join(st.Dir(), "quarantine"))
	if len(q) != 6 {
		t.Fatalf("quarantined %d files", len(q))
	}
}

func TestConcurrentUpdatesKeepEveryWrite(t *testing.T) {
	tb, st, _ := newTable(t)
	const procs, writes = 8, 20
	for i := range procs {
		tb.Create(rec(fmt.Sprint("p", i), api.StateRunning))
	}
	var wg sync.WaitGroup
	for i := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range writes {
				if _, err := tb.Update(Key{Name: fmt.Sprint("p", i)}, func(r *Record) error { r.PID++; return nil }); err != nil {
					t.Error(err)
				}
				_ = tb.View().Records // readers never block
			}
		}()
	}
	wg.Wait()
	for i := range procs {
		r, _ := tb.Get(Key{Name: fmt.Sprint("p", i)})
		var disk Record
		st.Get(r.ID, &disk)
		if r.PID != writes || disk.PID != writes || disk.Rev != writes+1 {
			t.Fatalf("p%d: memory pid %d, disk pid %d rev %d", i, r.PID, disk.PID, disk.Rev)
		}
	}
}

func TestRemoveAll(t *testing.T) {
	tb, st, changes := newTable(t)
	for _, n := range []string{"a", "b", "c"} {
		tb.Create(rec(n, api.StateExited))
	}
	tb.Create(rec("live", api.StateRunning))
	before := len(*changes)
	busy := errors.New("live")
	var cleaned []string
	removed, failed, err := tb.RemoveAll([]Key{{Name: "c"}, {Name: "live"}, {Name: "a"}, {Name: "nope"}, {Name: "c"}}, Removal{Why: "retention",
		Check: func(r Record) error {
			if r.Live() {
				return busy
			}
			return nil
		},
		Clean: func(r Record) {
			if len(*changes) != before {
				t.Errorf("%s cleaned after a change was published", r.Name)
			}
			cleaned = append(cleaned, r.Name)
		}})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || removed[0].Name != "c" || removed[1].Name != "a" {
		t.Fatalf("removed %+v, want c then a", removed)
	}
	if !slices.Equal(cleaned, []string{"c", "a"}) {
		t.Fatalf("cleaned %v, want c then a", cleaned)
	}
	if len(failed) != 2 || !errors.Is(failed[Key{Name: "live"}], busy) || !errors.Is(failed[Key{Name: "nope"}], ErrNotFound) {
		t.Fatalf("failed %v, want live refused by check and nope not found", failed)
	}
	v := tb.View()
	if len(v.Records) != 2 || v.Records[0].Name != "b" || v.Records[1].Name != "live" {
		t.Fatalf("left %+v, want b and live", v.Records)
	}
	if keys, _ := st.Keys(); len(keys) != 2 {
		t.Fatalf("stored keys %v, want 2", keys)
	}
	got := (*changes)[before:]
	if len(got) != 2 || got[0].Old.Name != "c" || got[1].Old.Name != "a" || got[0].Why != "retention" || got[1].New != nil {
		t.Fatalf("changes %+v", got)
	}
	if got[1].Seq != got[0].Seq+1 || v.Seq != got[1].Seq {
		t.Fatalf("seqs %d, %d, view %d: want consecutive, the view at the last", got[0].Seq, got[1].Seq, v.Seq)
	}
}

// TestCreateWithin: admit sees the live records of the new record's owner
// only (exited ones and other owners' do not count), and its refusal
// stores and publishes nothing.
func TestCreateWithin(t *testing.T) {
	tb, st, changes := newTable(t)
	owned := func(name string, uid uint32, state api.State) Record {
		r := rec(name, state)
		r.Owner = Owner{UID: uid, User: fmt.Sprint("u", uid)}
		return r
	}
	for _, r := range []Record{owned("a1", 1000, api.StateRunning), owned("a2", 1000, api.StateFrozen),
		owned("a3", 1000, api.StateExited), owned("b1", 1001, api.StateRunning)} {
		if _, err := tb.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	var saw int
	refuse := errors.New("over the cap")
	if _, err := tb.CreateWithin(owned("a4", 1000, api.StateStarting), func(live int) error { saw = live; return refuse }); !errors.Is(err, refuse) {
		t.Fatalf("refused create: %v", err)
	}
	if saw != 2 {
		t.Errorf("admit saw %d live records of uid 1000, want 2 (running and frozen; not exited, not uid 1001's)", saw)
	}
	keys, _ := st.Keys()
	if _, ok := tb.Get(Key{UID: 1000, Name: "a4"}); ok || len(keys) != 4 || len(*changes) != 4 {
		t.Fatalf("a refused create changed the table: %d stored, %d changes", len(keys), len(*changes))
	}
	if _, err := tb.CreateWithin(owned("a4", 1000, api.StateStarting), func(int) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestViewHostMiB: the snapshot keeps the GPU memory parked in host RAM,
// live trees with a checkpoint not on disk, and follows each change.
func TestViewHostMiB(t *testing.T) {
	tb, _, _ := newTable(t)
	parked := func(mib uint64) *Checkpoint {
		return &Checkpoint{Procs: []CheckpointProc{{PID: 1, VRAM: map[string]uint64{"GPU-a": mib}}}}
	}
	for _, r := range []Record{
		{ID: "1", Name: "frozen", State: api.StateFrozen, Checkpoint: parked(100)},
		{ID: "2", Name: "hibernated", State: api.StateHibernated, Checkpoint: parked(1000)},
		{ID: "3", Name: "gone", State: api.StateExited, Checkpoint: parked(10000)},
		{ID: "4", Name: "running", State: api.StateRunning},
	} {
		r.Cmd = []string{"true"}
		if _, err := tb.Create(r); err != nil {
			t.Fatal(err)
		}
	}
	if got := tb.View().HostMiB(); got != 100 {
		t.Fatalf("host MiB %d; want 100 (the frozen one only)", got)
	}
	for _, step := range []struct {
		name  string
		state api.State
		cp    *Checkpoint
	}{
		{"running", api.StateFreezing, parked(20)},
		{"running", api.StateFrozen, parked(20)},
		{"frozen", api.StateThawing, parked(100)},
		{"frozen", api.StateRunning, nil},
	} {
		if _, err := tb.Update(Key{Name: step.name}, func(r *Record) error { r.State, r.Checkpoint = step.state, step.cp; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if got := tb.View().HostMiB(); got != 20 {
		t.Errorf("after one freeze and one thaw: host MiB %d; want 20", got)
	}
	// Each owner's part: another owner's frozen record counts as theirs,
	// and an earlier snapshot keeps its own counts.
	before := tb.View()
	other := Record{ID: "5", Name: "theirs", Owner: Owner{UID: 1000}, State: api.StateFrozen, Checkpoint: parked(300), Cmd: []string{"true"}}
	if _, err := tb.Create(other); err != nil {
		t.Fatal(err)
	}
	v := tb.View()
	if got := [...]uint64{v.HostMiBOf(0), v.HostMiBOf(1000), v.HostMiB(), before.HostMiBOf(1000)}; got != [...]uint64{20, 300, 320, 0} {
		t.Errorf("root's, uid 1000's, all and uid 1000's before: %v; want [20 300 320 0]", got)
	}
	if _, err := tb.Update(Key{UID: 1000, Name: "theirs"}, func(r *Record) error { r.State = api.StateHibernated; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := tb.View().HostMiBOf(1000); got != 0 {
		t.Errorf("uid 1000's after their hibernate: %d MiB; want 0", got)
	}
}

// TestNamesPerOwner: two owners' records of one name are two records. A
// creation replaces only its own owner's exited record, an update or a
// removal reaches only its key's, and Named lists both, by owner.
func TestNamesPerOwner(t *testing.T) {
	tb, _, _ := newTable(t)
	owned := func(uid uint32, state api.State) Record {
		r := rec("train", state)
		r.ID, r.Owner = fmt.Sprintf("id-%d-%s", uid, state), Owner{UID: uid, User: fmt.Sprint("u", uid)}
		return r
	}
	alice, bob := Key{UID: 1000, Name: "train"}, Key{UID: 1001, Name: "train"}
	for _, r := range []Record{owned(1000, api.StateExited), owned(1001, api.StateRunning)} {
		if _, err := tb.Create(r); err != nil {
			t.Fatalf("create %v: %v", r.Key(), err)
		}
	}
	if _, err := tb.Create(owned(1001, api.StateStarting)); !errors.Is(err, ErrExists) {
		t.Fatalf("bob's second live train: %v, want ErrExists", err)
	}
	if got, _ := tb.Get(alice); got.ID != "id-1000-exited" {
		t.Fatalf("alice's train: %+v", got)
	}
	if _, err := tb.Update(bob, func(r *Record) error { r.PID = 7; return nil }); err != nil {
		t.Fatal(err)
	}
	if got, _ := tb.Get(alice); got.PID != 0 {
		t.Fatalf("bob's update reached alice's record: %+v", got)
	}
	named := tb.View().Named("train")
	if len(named) != 2 || named[0].Key() != alice || named[1].Key() != bob || len(tb.View().Named("trai")) != 0 {
		t.Fatalf("Named(train): %v", named)
	}
	if _, err := tb.Update(alice, func(r *Record) error { r.Owner.UID = 1001; return nil }); err == nil {
		t.Fatal("an update moved a record to another owner")
	}
	if _, err := tb.Remove(alice, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := tb.Get(bob); !ok || len(tb.View().Named("train")) != 1 {
		t.Fatal("alice's removal took bob's record")
	}
}

func TestParseKeyReadsString(t *testing.T) {
	for _, k := range []Key{{UID: 0, Name: "a"}, {UID: 4294967295, Name: "x.y-z_1"}} {
		if got, ok := ParseKey(k.String()); !ok || got != k {
			t.Errorf("ParseKey(%q) = %v %v, want %v", k.String(), got, ok, k)
		}
	}
	for _, s := range []string{"", "a", "1/", "/a", "x/a", "4294967296/a"} {
		if _, ok := ParseKey(s); ok {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
}
