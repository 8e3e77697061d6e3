package proctable

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/oomscore"
	"github.com/gpusched/gpusched/pkg/api"
)

// Problem is a persisted record that could not be loaded; it was moved to
// quarantine and is ignored.
type Problem struct {
	Key        string
	Err        error
	Quarantine string // where the file went
}

// Load fills an empty table from its store. Records that do not decode or
// validate, and older duplicates of a key, are quarantined and reported;
// they never stop the load.
func (t *Table) Load() ([]Problem, error) {
	keys, err := t.store.Keys()
	if err != nil {
		return nil, err
	}
	var problems []Problem
	bad := func(key string, err error) {
		q, qerr := t.store.Quarantine(key)
		if qerr != nil {
			err = fmt.Errorf("%w (quarantine failed: %v)", err, qerr)
		}
		problems = append(problems, Problem{Key: key, Err: err, Quarantine: q})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, key := range keys {
		var r Record
		if err := t.store.Get(key, &r); err != nil {
			bad(key, err)
			continue
		}
		if err := validate(key, r); err != nil {
			bad(key, err)
			continue
		}
		if cur := t.byKey[r.Key()]; cur != nil {
			keep, drop := cur.rec, r
			if r.Live() && !cur.rec.Live() || r.CreatedAt.After(cur.rec.CreatedAt) && r.Live() == cur.rec.Live() {
				keep, drop = r, cur.rec
			}
			bad(drop.ID, fmt.Errorf("process %q: duplicate record, kept %s", r.Name, keep.ID))
			if keep.ID == cur.rec.ID {
				continue
			}
		}
		t.byKey[r.Key()] = &entry{rec: r}
	}
	ids := make(map[string]bool, len(t.byKey))
	for _, e := range t.byKey {
		ids[e.rec.ID] = true
		t.keepCmdCutLocked(e)
	}
	if err := t.cmds.Prune(func(id string) bool { return ids[id] }); err != nil {
		return nil, err
	}
	t.rebuildLocked()
	return problems, nil
}

// keepCmdCutLocked moves the whole command of a record written before
// records kept theirs cut into the table's commands, and rewrites the
// record with it cut. It changes nothing where either write fails: the
// record then keeps its command whole.
func (t *Table) keepCmdCutLocked(e *entry) {
	if e.rec.CmdTruncated {
		return
	}
	kept, cut := keptCmd(e.rec.Cmd)
	if !cut || t.cmds.Put(e.rec.ID, e.rec.Cmd) != nil {
		return
	}
	next := e.rec
	next.Cmd, next.CmdTruncated = kept, true
	if err := t.store.Put(next.ID, next); err != nil {
		t.cmds.Remove(next.ID)
		return
	}
	e.rec = next
}

func validate(key string, r Record) error {
	if r.ID != key {
		return fmt.Errorf("record %s: id %q does not match its file", key, r.ID)
	}
	if err := api.ValidateName(r.Name); err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	if _, ok := transitions[r.State]; !ok {
		return fmt.Errorf("record %s: unknown state %q", key, r.State)
	}
	if len(r.Cmd) == 0 {
		return fmt.Errorf("record %s: no command", key)
	}
	if err := r.Rlimits.Validate(); err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	if err := oomscore.Validate(r.OOMScoreAdj); err != nil {
		return fmt.Errorf("record %s: %w", key, err)
	}
	if r.CPUs != "" {
		if _, err := cpuaffinity.Parse(r.CPUs); err != nil {
			return fmt.Errorf("record %s: cpus %q: %w", key, r.CPUs, err)
		}
	}
	return nil
}
