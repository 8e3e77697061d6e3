package proctable

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

// TestViewAfterChangesAsRebuilt: the snapshot each change leaves, made from
// the one before by that change alone, is the one a sort and count of the
// whole table gives, through random creations (over exited records too),
// updates of state, owner and parked memory, removals and batch removals;
// and every earlier snapshot stays as it was.
func TestViewAfterChangesAsRebuilt(t *testing.T) {
	tb, _, _ := newTable(t)
	rng := rand.New(rand.NewPCG(1, 2))
	key := func() Key { return Key{UID: uint32(1000 + rng.IntN(4)), Name: fmt.Sprintf("p%02d", rng.IntN(40))} }
	states := []api.State{api.StateRunning, api.StateFreezing, api.StateFrozen, api.StateHibernating, api.StateHibernated, api.StateExited}
	type kept struct {
		v    *View
		want *View
	}
	var earlier []kept
	for step := range 3000 {
		var err error
		switch op := rng.IntN(10); {
		case op < 3:
			k := key()
			r := rec(k.Name, api.StateRunning)
			r.ID = fmt.Sprintf("id-%d", step)
			r.Owner.UID = k.UID
			_, err = tb.Create(r)
		case op < 8:
			_, err = tb.Update(key(), func(r *Record) error {
				r.State = states[rng.IntN(len(states))]
				r.Checkpoint = nil
				if rng.IntN(2) == 0 {
					r.Checkpoint = &Checkpoint{Procs: []CheckpointProc{{PID: step, VRAM: map[string]uint64{"GPU-0": uint64(rng.IntN(1000))}}}}
				}
				return nil
			})
		case op < 9:
			_, err = tb.Remove(key(), nil)
		default:
			_, _, err = tb.RemoveAll([]Key{key(), key(), key()}, Removal{})
		}
		var te *TransitionError
		if err != nil && !errors.Is(err, ErrExists) && !errors.Is(err, ErrNotFound) && !errors.As(err, &te) {
			t.Fatalf("step %d: %v", step, err)
		}
		got, want := tb.View(), rebuilt(tb)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: the snapshot after the change\n%+v\nwant, as rebuilt\n%+v", step, got, want)
		}
		if step%100 == 0 {
			earlier = append(earlier, kept{got, rebuilt(tb)})
		}
	}
	for i, k := range earlier {
		if !reflect.DeepEqual(k.v, k.want) {
			t.Fatalf("snapshot %d changed after it was taken", i)
		}
	}
}

// rebuilt is the snapshot of tb's records, sorted and counted anew.
func rebuilt(tb *Table) *View {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	recs := make([]*Record, 0, len(tb.byKey))
	for _, e := range tb.byKey {
		r := e.rec
		recs = append(recs, &r)
	}
	return viewOf(recs, tb.seq)
}
