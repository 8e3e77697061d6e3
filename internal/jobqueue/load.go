package jobqueue

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpusched/gpusched/internal/cpuaffinity"
	"github.com/gpusched/gpusched/internal/oomscore"
	"github.com/gpusched/gpusched/pkg/api"
)

// Problem is a persisted job that could not be loaded; it was moved to
// quarantine and is ignored.
type Problem struct {
	Key        string
	Err        error
	Quarantine string
}

// Load fills an empty queue from its store. Records that do not decode or
// validate are quarantined and reported; they never stop the load.
func (q *Queue) Load() ([]Problem, error) {
	keys, err := q.store.Keys()
	if err != nil {
		return nil, err
	}
	var problems []Problem
	q.mu.Lock()
	defer q.mu.Unlock()
	all := []*Job{}
	for _, key := range keys {
		if key == seqKey {
			if err := q.loadSeqMark(); err != nil {
				dst, qerr := q.store.Quarantine(key)
				if qerr != nil {
					err = fmt.Errorf("%w (quarantine failed: %v)", err, qerr)
				}
				problems = append(problems, Problem{Key: key, Err: err, Quarantine: dst})
			}
			continue
		}
		j := &Job{}
		err := q.store.Get(key, j)
		if err == nil {
			err = validate(key, j)
		}
		if err != nil {
			dst, qerr := q.store.Quarantine(key)
			if qerr != nil {
				err = fmt.Errorf("%w (quarantine failed: %v)", err, qerr)
			}
			problems = append(problems, Problem{Key: key, Err: err, Quarantine: dst})
			continue
		}
		all = append(all, j)
	}
	slices.SortFunc(all, func(a, b *Job) int { return cmpSeq(a.Seq, b.Seq) })
	for i, j := range all {
		all[i] = q.movedApartLocked(j)
		j = all[i]
		q.byID[j.ID] = j
		q.byName[ownedName{j.Owner.UID, j.Name}] = j.ID
		q.seq = max(q.seq, j.Seq)
	}
	q.seq = max(q.seq, q.seqMark)
	if err := q.whole.Prune(func(id string) bool { return q.byID[id] != nil }); err != nil {
		return nil, err
	}
	q.storeLocked(all, nil, all)
	return problems, nil
}

// movedApartLocked is j with its whole command and environment moved
// apart, where it finished before finished jobs kept theirs cut, and its
// record rewritten so; j as it is where nothing is to move or a write
// fails.
func (q *Queue) movedApartLocked(j *Job) *Job {
	if j.Apart {
		return j
	}
	next := j.clone()
	if q.putApartLocked(next) != nil || !next.Apart {
		return j
	}
	if err := q.store.Put(next.ID, next); err != nil {
		q.whole.Remove(next.ID)
		return j
	}
	return next
}

func validate(key string, j *Job) error {
	switch {
	case j.ID != key:
		return fmt.Errorf("job record %s holds id %q", key, j.ID)
	case j.Seq == 0:
		return fmt.Errorf("job %s: no sequence number", key)
	case j.ID != "j"+strconv.FormatUint(j.Seq, 10):
		// Add names the record of sequence number n j<n>: a record that
		// breaks this would be overwritten by a later Add.
		return fmt.Errorf("job %s: sequence number %d does not match its id", key, j.Seq)
	case api.ValidateName(j.Name) != nil:
		return fmt.Errorf("job %s: bad name %q", key, j.Name)
	case len(j.Cmd) == 0:
		return fmt.Errorf("job %s: empty command", key)
	case j.GPUs < 1:
		return fmt.Errorf("job %s: %d GPUs", key, j.GPUs)
	case j.State == "":
		return fmt.Errorf("job %s: no state", key)
	case j.Nice < -20 || j.Nice > 19:
		return fmt.Errorf("job %s: nice %d outside -20..19", key, j.Nice)
	case j.MPSThreads < 0 || j.MPSThreads > 100:
		return fmt.Errorf("job %s: mps_threads %d outside 0..100", key, j.MPSThreads)
	}
	if err := j.Rlimits.Validate(); err != nil {
		return fmt.Errorf("job %s: %w", key, err)
	}
	if err := oomscore.Validate(j.OOMScoreAdj); err != nil {
		return fmt.Errorf("job %s: %w", key, err)
	}
	if j.CPUs != "" {
		if _, err := cpuaffinity.Parse(j.CPUs); err != nil {
			return fmt.Errorf("job %s: cpus %q: %w", key, j.CPUs, err)
		}
	}
	return nil
}
