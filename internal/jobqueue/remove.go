package jobqueue

import (
	"fmt"
	"slices"
)

// seqKey is the store key of the sequence mark; no job id has its form.
const seqKey = "seq"

// seqMark is the highest sequence number handed out, as persisted.
type seqMark struct {
	Seq uint64 `json:"seq"`
}

// loadSeqMark reads the persisted sequence mark; it runs under q.mu.
func (q *Queue) loadSeqMark() error {
	var m seqMark
	if err := q.store.Get(seqKey, &m); err != nil {
		return err
	}
	q.seqMark = m.Seq
	return nil
}

// RemoveAll forgets each job of ids that check (may be nil) accepts, with
// one directory sync for all, and publishes each removal with why. It
// returns the jobs removed, in the order given, and why each other id was
// not. err is a failure to persist: nothing was removed when the sequence
// mark could not be written; when the final directory sync failed the jobs
// are gone from the queue and their files deleted, but a machine crash may
// bring them back.
func (q *Queue) RemoveAll(ids []string, why string, check func(*Job) error) (removed []*Job, failed map[string]error, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	failed = map[string]error{}
	var gone []*Job
	var newest uint64
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		j, ok := q.byID[id]
		if !ok {
			failed[id] = fmt.Errorf("job %s: %w", id, ErrNotFound)
			continue
		}
		if check != nil {
			if err := check(j); err != nil {
				failed[id] = err
				continue
			}
		}
		gone = append(gone, j)
		newest = max(newest, j.Seq)
	}
	if len(gone) == 0 {
		return nil, failed, nil
	}
	if newest > q.seqMark {
		if err := q.store.Put(seqKey, seqMark{Seq: q.seq}); err != nil {
			return nil, failed, fmt.Errorf("remove jobs: persist the sequence number: %w", err)
		}
		q.seqMark = q.seq
	}
	drop := map[string]bool{}
	for _, j := range gone {
		if err := q.store.DeleteVolatile(j.ID); err != nil {
			failed[j.ID] = fmt.Errorf("job %q: %w", j.Name, err)
			continue
		}
		q.whole.Remove(j.ID)
		drop[j.ID] = true
		removed = append(removed, j)
	}
	if len(removed) == 0 {
		return nil, failed, nil
	}
	if serr := q.store.Sync(); serr != nil {
		err = fmt.Errorf("remove %d jobs: %w", len(removed), serr)
	}
	q.forgetLocked(removed, drop)
	for _, j := range removed {
		q.publishLocked(Change{Old: j, Why: why})
	}
	return removed, failed, err
}

// forgetLocked drops removed (their ids in drop) from the indexes and the
// view. An owner's name whose newest job went names their newest
// remaining one.
func (q *Queue) forgetLocked(removed []*Job, drop map[string]bool) {
	renamed := map[ownedName]bool{}
	for _, j := range removed {
		delete(q.byID, j.ID)
		if key := (ownedName{j.Owner.UID, j.Name}); q.byName[key] == j.ID {
			delete(q.byName, key)
			renamed[key] = true
		}
	}
	v := slices.DeleteFunc(slices.Clone(q.View()), func(j *Job) bool { return drop[j.ID] })
	for i := len(v) - 1; i >= 0 && len(renamed) > 0; i-- {
		if key := (ownedName{v[i].Owner.UID, v[i].Name}); renamed[key] {
			q.byName[key] = v[i].ID
			delete(renamed, key)
		}
	}
	q.storeLocked(v, removed, nil)
}
