package proctable

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// Change is one published modification. Old is nil for a new record; New
// is nil for a removed one.
type Change struct {
	Seq uint64
	Old *Record
	New *Record
	Why string // why a record was removed, as RemoveAll was told
}

// View is an immutable snapshot of the table, sorted by name, then owner.
type View struct {
	Seq     uint64
	Records []*Record                    // shared by every snapshot that holds them: read only
	states  map[uint32]map[api.State]int // each owner's records by state
	hostMiB uint64                       // GPU memory parked in host RAM, all records
	ownHost map[uint32]uint64            // of it, each owner's
}

// States is how many records each owner has in each state; read only.
// A caller's own counts cost what the number of owners costs, not what
// the whole table does.
func (v *View) States() map[uint32]map[api.State]int { return v.states }

// HostMiB is the GPU memory that the snapshot's records park in host RAM
// (InHostRAM), summed when the snapshot was taken.
func (v *View) HostMiB() uint64 { return v.hostMiB }

// HostMiBOf is what of HostMiB uid's records park.
func (v *View) HostMiBOf(uid uint32) uint64 { return v.ownHost[uid] }

// Get finds a record by key in the snapshot.
func (v *View) Get(k Key) (Record, bool) {
	i, ok := slices.BinarySearchFunc(v.Records, k, byKey)
	if !ok {
		return Record{}, false
	}
	return *v.Records[i], true
}

// Named is every record of name, whoever owns it, by owner; read only.
func (v *View) Named(name string) []*Record {
	i, _ := slices.BinarySearchFunc(v.Records, Key{Name: name}, byKey)
	j := i
	for j < len(v.Records) && v.Records[j].Name == name {
		j++
	}
	return v.Records[i:j:j]
}

// LiveOf counts uid's live records in the snapshot.
func (v *View) LiveOf(uid uint32) int {
	n := 0
	for _, r := range v.Records {
		if r.Owner.UID == uid && r.Live() {
			n++
		}
	}
	return n
}

type entry struct {
	mu      sync.Mutex // serializes writes of this record
	rec     Record     // guarded by Table.mu for reads, by mu+Table.mu for writes
	removed bool
}

// Table holds the managed processes.
type Table struct {
	store    *store.Records
	cmds     *store.Apart // whole commands of the records that keep theirs cut
	onChange func(Change) // called in Seq order, must not block

	mu    sync.Mutex
	byKey map[Key]*entry
	seq   uint64
	view  atomic.Pointer[View]
}

// New creates an empty table writing through st. onChange (may be nil) sees
// every change in order; it runs under the table lock and must not block.
func New(st *store.Records, onChange func(Change)) *Table {
	t := &Table{store: st, cmds: st.Apart(commandsDir, maxCommandFile), onChange: onChange, byKey: map[Key]*entry{}}
	t.view.Store(viewOf([]*Record{}, 0))
	return t
}

// View returns the current snapshot without locking.
func (t *Table) View() *View { return t.view.Load() }

// Get returns the current record of k.
func (t *Table) Get(k Key) (Record, bool) { return t.View().Get(k) }

// Create adds rec, whose Cmd is the whole command (the record keeps it cut
// past KeptCmdBytes: Command). A key held by an exited process is taken
// over (that record is removed); a key held by a live one gives ErrExists.
// Another owner's record of the same name is another key.
func (t *Table) Create(rec Record) (Record, error) { return t.CreateWithin(rec, nil) }

// CreateWithin is Create, once admit (nil: always) accepts the number of
// live records rec's owner has. It is asked under the table's lock, so
// that concurrent creations are counted one after the other; its error
// refuses rec with nothing changed.
func (t *Table) CreateWithin(rec Record, admit func(live int) error) (Record, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.byKey[rec.Key()]
	if old != nil && old.rec.Live() {
		return Record{}, fmt.Errorf("process %q: %w (state %s)", rec.Name, ErrExists, old.rec.State)
	}
	if admit != nil {
		if err := admit(t.liveLocked(rec.Owner.UID)); err != nil {
			return Record{}, err
		}
	}
	rec = rec.Clone()
	rec.Rev = 1
	if kept, cut := keptCmd(rec.Cmd); cut {
		if err := t.cmds.Put(rec.ID, rec.Cmd); err != nil {
			return Record{}, fmt.Errorf("process %q: %w", rec.Name, err)
		}
		rec.Cmd, rec.CmdTruncated = kept, true
	}
	if err := t.store.Put(rec.ID, rec); err != nil {
		t.cmds.Remove(rec.ID)
		return Record{}, fmt.Errorf("process %q: %w", rec.Name, err)
	}
	if old != nil {
		if err := t.store.Delete(old.rec.ID); err != nil {
			return Record{}, fmt.Errorf("process %q: forget replaced record: %w", rec.Name, err)
		}
		t.cmds.Remove(old.rec.ID)
		old.removed = true
		delete(t.byKey, rec.Key())
		prev := old.rec
		t.publishLocked(Change{Old: &prev})
	}
	t.byKey[rec.Key()] = &entry{rec: rec}
	t.publishLocked(Change{New: &rec})
	return rec, nil
}

// Command is r's whole command: r.Cmd, or where the record keeps that cut
// (CmdTruncated), the whole one the table keeps on disk.
func (t *Table) Command(r Record) ([]string, error) {
	if !r.CmdTruncated {
		return r.Cmd, nil
	}
	var cmd []string
	if err := t.cmds.Get(r.ID, &cmd); err != nil {
		return nil, fmt.Errorf("process %q: its command: %w", r.Name, err)
	}
	if len(cmd) == 0 {
		return nil, fmt.Errorf("process %q: its command kept apart is empty", r.Name)
	}
	return cmd, nil
}

// Update applies fn to a copy of k's record, checks the state
// transition, persists and publishes the result. fn returning an error
// aborts with nothing changed.
func (t *Table) Update(k Key, fn func(*Record) error) (Record, error) {
	name := k.Name
	e, err := t.entry(k)
	if err != nil {
		return Record{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.mu.Lock()
	cur, removed := e.rec, e.removed
	t.mu.Unlock()
	if removed {
		return Record{}, fmt.Errorf("process %q: %w", name, ErrNotFound)
	}
	next := cur.Clone()
	if err := fn(&next); err != nil {
		return Record{}, err
	}
	if next.ID != cur.ID || next.Key() != cur.Key() {
		return Record{}, fmt.Errorf("process %q: update may not change identity", name)
	}
	if !CanTransition(cur.State, next.State) {
		return Record{}, &TransitionError{Name: name, From: cur.State, To: next.State}
	}
	next.Rev = cur.Rev + 1
	put := t.store.Put
	if diesWithMachine(cur.State) && diesWithMachine(next.State) {
		put = t.store.PutVolatile
	}
	if err := put(next.ID, next); err != nil {
		return Record{}, fmt.Errorf("process %q: %w", name, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e.rec = next
	t.publishLocked(Change{Old: &cur, New: &next})
	return next, nil
}

// Remove forgets k when check (may be nil) accepts its record.
func (t *Table) Remove(k Key, check func(Record) error) (Record, error) {
	name := k.Name
	e, err := t.entry(k)
	if err != nil {
		return Record{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.removed {
		return Record{}, fmt.Errorf("process %q: %w", name, ErrNotFound)
	}
	if check != nil {
		if err := check(e.rec); err != nil {
			return Record{}, err
		}
	}
	if err := t.store.Delete(e.rec.ID); err != nil {
		return Record{}, fmt.Errorf("process %q: %w", name, err)
	}
	t.cmds.Remove(e.rec.ID)
	e.removed = true
	delete(t.byKey, k)
	rec := e.rec
	t.publishLocked(Change{Old: &rec})
	return rec, nil
}

// Removal says how RemoveAll treats the records it is given.
type Removal struct {
	Why   string             // goes with each change published
	Check func(Record) error // refuses a record with an error (nil: none)
	// Clean runs for each record removed, before its change is published,
	// so that whoever sees the change sees what Clean removes gone (nil:
	// none). It runs under the table's lock: keep it short.
	Clean func(Record)
}

// RemoveAll forgets each keyed record that how.Check accepts, as Remove
// does one, with one directory sync and one new snapshot for all: for
// removing many at once. It returns the records removed, in the order
// given, and why each other key was not. err is a failed directory sync:
// the records are gone from the table and their files deleted, but a
// machine crash may bring them back.
func (t *Table) RemoveAll(keys []Key, how Removal) (removed []Record, failed map[Key]error, err error) {
	failed = map[Key]error{}
	type held struct {
		key Key
		e   *entry
	}
	var hold []held
	defer func() {
		for _, h := range hold {
			h.e.mu.Unlock()
		}
	}()
	seen := map[Key]bool{}
	for _, k := range keys {
		if seen[k] {
			continue
		}
		seen[k] = true
		e, err := t.entry(k)
		if err != nil {
			failed[k] = err
			continue
		}
		// Safe to hold several: no other writer holds more than one.
		e.mu.Lock()
		hold = append(hold, held{k, e})
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var gone []*entry
	for _, h := range hold {
		switch {
		case h.e.removed:
			failed[h.key] = fmt.Errorf("process %q: %w", h.key.Name, ErrNotFound)
			continue
		case how.Check != nil:
			if err := how.Check(h.e.rec); err != nil {
				failed[h.key] = err
				continue
			}
		}
		if err := t.store.DeleteVolatile(h.e.rec.ID); err != nil {
			failed[h.key] = fmt.Errorf("process %q: %w", h.key.Name, err)
			continue
		}
		t.cmds.Remove(h.e.rec.ID)
		gone = append(gone, h.e)
	}
	if len(gone) == 0 {
		return nil, failed, nil
	}
	if serr := t.store.Sync(); serr != nil {
		err = fmt.Errorf("forget %d processes: %w", len(gone), serr)
	}
	changes := make([]Change, len(gone))
	for i, e := range gone {
		e.removed = true
		delete(t.byKey, e.rec.Key())
		rec := e.rec
		removed = append(removed, rec)
		t.seq++
		changes[i] = Change{Seq: t.seq, Old: &rec, Why: how.Why}
		if how.Clean != nil {
			how.Clean(rec)
		}
	}
	t.snapshotLocked()
	if t.onChange != nil {
		for _, c := range changes {
			t.onChange(c)
		}
	}
	return removed, failed, err
}

// liveLocked counts uid's live records.
func (t *Table) liveLocked(uid uint32) int {
	n := 0
	for _, e := range t.byKey {
		if e.rec.Owner.UID == uid && e.rec.Live() {
			n++
		}
	}
	return n
}

// entry finds k's entry.
func (t *Table) entry(k Key) (*entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byKey[k]; e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("process %q: %w", k.Name, ErrNotFound)
}

// publishLocked stores the snapshot after c, under the next sequence
// number, and reports c.
func (t *Table) publishLocked(c Change) {
	t.seq++
	t.view.Store(t.View().with(c, t.seq))
	c.Seq = t.seq
	if t.onChange != nil {
		t.onChange(c)
	}
}

// rebuildLocked stores a fresh snapshot under the next sequence number.
func (t *Table) rebuildLocked() {
	t.seq++
	t.snapshotLocked()
}

// snapshotLocked stores a fresh snapshot under the current sequence number.
func (t *Table) snapshotLocked() {
	recs := make([]*Record, 0, len(t.byKey))
	for _, e := range t.byKey {
		r := e.rec // e.rec is replaced, not shared, by the next change
		recs = append(recs, &r)
	}
	t.view.Store(viewOf(recs, t.seq))
}
