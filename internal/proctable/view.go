package proctable

import (
	"maps"
	"slices"

	"github.com/gpusched/gpusched/pkg/api"
)

// viewOf is the snapshot of recs, given in any order (sorted in place),
// under seq.
func viewOf(recs []*Record, seq uint64) *View {
	slices.SortFunc(recs, func(a, b *Record) int { return compareKeys(a.Key(), b.Key()) })
	v := &View{Seq: seq, Records: recs, states: map[uint32]map[api.State]int{}, ownHost: map[uint32]uint64{}}
	for _, r := range recs {
		v.count(r, 1)
	}
	return v
}

// with is the snapshot after c, under seq: its record replaced, added or
// removed in a copy of v's pointers, and the counts moved by it alone.
// Copying, sorting and counting every record again made a change cost 1.3
// to 1.4 ms among 1,000 records and 14 to 16 ms among 10,000, with the
// record written to tmpfs (BenchmarkUpdate); 36 to 39 and 96 to 104 us
// this way.
func (v *View) with(c Change, seq uint64) *View {
	key := c.Old
	if c.New != nil {
		key = c.New
	}
	i, found := slices.BinarySearchFunc(v.Records, key.Key(), byKey)
	var recs []*Record
	var rec *Record // the snapshot's own copy of c.New: whoever sees c may change that
	if c.New != nil {
		r := *c.New
		rec = &r
	}
	switch {
	case c.New != nil && found:
		recs = slices.Clone(v.Records)
		recs[i] = rec
	case c.New != nil:
		recs = make([]*Record, len(v.Records)+1)
		copy(recs, v.Records[:i])
		recs[i] = rec
		copy(recs[i+1:], v.Records[i:])
	case found:
		recs = make([]*Record, len(v.Records)-1)
		copy(recs, v.Records[:i])
		copy(recs[i:], v.Records[i+1:])
	default:
		recs = v.Records
	}
	// The counts are shared with v: the owners' that change are copied.
	next := &View{Seq: seq, Records: recs, states: maps.Clone(v.states), hostMiB: v.hostMiB, ownHost: v.ownHost}
	if c.Old != nil && c.Old.InHostRAM() || c.New != nil && c.New.InHostRAM() {
		next.ownHost = maps.Clone(v.ownHost)
	}
	for _, r := range []*Record{c.Old, c.New} {
		if r == nil {
			continue
		}
		if m := next.states[r.Owner.UID]; m != nil {
			next.states[r.Owner.UID] = maps.Clone(m)
		}
	}
	if c.Old != nil && found {
		next.count(c.Old, -1)
	}
	if c.New != nil {
		next.count(c.New, 1)
	}
	return next
}

// byKey orders records by key, for a binary search of a snapshot.
func byKey(r *Record, k Key) int { return compareKeys(r.Key(), k) }

// count adds d of r to v's counts, which must be v's own.
func (v *View) count(r *Record, d int) {
	m := v.states[r.Owner.UID]
	if m == nil {
		m = map[api.State]int{}
		v.states[r.Owner.UID] = m
	}
	if m[r.State] += d; m[r.State] == 0 {
		delete(m, r.State)
	}
	if len(m) == 0 {
		delete(v.states, r.Owner.UID)
	}
	if r.InHostRAM() {
		mib := r.Checkpoint.MiB()
		if d > 0 {
			v.hostMiB += mib
			v.ownHost[r.Owner.UID] += mib
		} else {
			v.hostMiB -= mib
			if v.ownHost[r.Owner.UID] -= mib; v.ownHost[r.Owner.UID] == 0 {
				delete(v.ownHost, r.Owner.UID)
			}
		}
	}
}
