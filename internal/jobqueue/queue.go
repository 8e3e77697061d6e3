package jobqueue

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpusched/gpusched/internal/store"
	"github.com/gpusched/gpusched/pkg/api"
)

// Change is one published modification; Old is nil for a new job, New
// for a removed one.
type Change struct {
	Old, New *Job
	Why      string // why a job was removed, as RemoveAll was told
}

// Queue holds every job, unfinished and finished, persisted one file each.
type Queue struct {
	store    *store.Records
	whole    *store.Apart // whole commands and environments of finished jobs (Apart)
	onChange func(Change) // called in order under the queue lock; must not block

	mu     sync.Mutex
	byID   map[string]*Job
	byName map[ownedName]string // owner and name -> id of the owner's newest job of that name
	seq    uint64
	// seqMark is the sequence number last persisted under seqKey: removing
	// the newest jobs must not let a restarted queue hand their ids out
	// again.
	seqMark uint64
	view    atomic.Pointer[view]
}

// view is what View, States and Active read.
type view struct {
	jobs   []*Job                          // sorted by Seq; entries never modified
	states map[uint32]map[api.JobState]int // each owner's jobs by state
	active []*Job                          // the jobs with a current attempt, sorted by Seq
}

// storeLocked publishes jobs, sorted by Seq, as the view: the last one
// with gone taken out and added put in. Each owner's counts are carried
// over, copied only for the owners gone and added change, so that an
// update costs what the number of owners does, not the whole queue.
func (q *Queue) storeLocked(jobs, gone, added []*Job) {
	states := maps.Clone(q.view.Load().states)
	if states == nil {
		states = map[uint32]map[api.JobState]int{}
	}
	touched := map[uint32]bool{}
	count := func(j *Job, d int) {
		uid := j.Owner.UID
		if !touched[uid] {
			touched[uid] = true
			m := make(map[api.JobState]int, len(states[uid])+1)
			maps.Copy(m, states[uid])
			states[uid] = m
		}
		states[uid][j.State] += d
	}
	for _, j := range gone {
		count(j, -1)
	}
	for _, j := range added {
		count(j, 1)
	}
	for uid := range touched {
		maps.DeleteFunc(states[uid], func(_ api.JobState, n int) bool { return n == 0 })
		if len(states[uid]) == 0 {
			delete(states, uid)
		}
	}
	q.view.Store(&view{jobs: jobs, states: states, active: activeAfter(q.view.Load().active, gone, added)})
}

// activeAfter is the active jobs of the last view with gone taken out and
// the active ones of added put in: what the jobs with a current attempt
// (a few per GPU) cost, not the whole queue.
func activeAfter(last, gone, added []*Job) []*Job {
	out := make([]*Job, 0, len(last)+len(added))
	for _, j := range last {
		if !slices.Contains(gone, j) {
			out = append(out, j)
		}
	}
	for _, j := range added {
		if j.Active() {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmpSeq(a.Seq, b.Seq) })
	return out
}

// New creates an empty queue writing through st; onChange may be nil.
func New(st *store.Records, onChange func(Change)) *Queue {
	q := &Queue{store: st, whole: st.Apart(wholeDir, maxWholeFile), onChange: onChange, byID: map[string]*Job{}, byName: map[ownedName]string{}}
	q.view.Store(&view{jobs: []*Job{}})
	return q
}

// View returns every job in submission order, without locking. The jobs
// must not be modified.
func (q *Queue) View() []*Job { return q.view.Load().jobs }

// States is how many jobs each owner has in each state, without locking;
// read only. A caller's own counts cost what the number of owners costs,
// not what the whole queue does.
func (q *Queue) States() map[uint32]map[api.JobState]int { return q.view.Load().states }

// Active is every job with a current attempt (Job.Active) in submission
// order, without locking: a loop over running work that does not walk the
// queued jobs. The jobs must not be modified.
func (q *Queue) Active() []*Job { return q.view.Load().active }

// ownedName is a job name of one owner's: names are per user, as the
// names of the processes jobs run as.
type ownedName struct {
	uid  uint32
	name string
}

// Get finds a job by id.
func (q *Queue) Get(id string) (*Job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j, ok := q.byID[id]
	return j, ok
}

// Owned finds uid's newest job named name.
func (q *Queue) Owned(uid uint32, name string) (*Job, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j := q.byID[q.byName[ownedName{uid, name}]]
	return j, j != nil
}

// Add assigns ids and sequence numbers to jobs (named job-<seq> when
// unnamed) and queues all of them durably, or none. A name may be reused
// by its owner only once their earlier job of that name has finished;
// another owner's job of that name is another job.
func (q *Queue) Add(jobs []*Job) ([]*Job, error) { return q.AddWithin(jobs, nil) }

// AddWithin is Add, once admit (nil: always) accepts, for each owner of
// jobs, how many unfinished jobs it has and how many of jobs are its. It
// is asked under the queue's lock, so that concurrent submissions are
// counted one after the other; its error refuses them all with nothing
// changed.
func (q *Queue) AddWithin(jobs []*Job, admit func(uid uint32, unfinished, adding int) error) ([]*Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if admit != nil {
		if err := q.admitLocked(jobs, admit); err != nil {
			return nil, err
		}
	}
	seen := map[ownedName]bool{}
	out := make([]*Job, len(jobs))
	keys := make([]string, len(jobs))
	vals := make([]any, len(jobs))
	for i, j := range jobs {
		j = j.clone()
		j.Seq = q.seq + uint64(i) + 1
		j.ID = fmt.Sprintf("j%d", j.Seq)
		if j.Name == "" {
			j.Name = "job-" + j.ID[1:]
		}
		if IsID(j.Name) && j.Name != j.ID {
			return nil, fmt.Errorf("job %q: %w (names of the form j<number> are job ids)", j.Name, ErrExists)
		}
		key := ownedName{j.Owner.UID, j.Name}
		if seen[key] {
			return nil, fmt.Errorf("job %q: %w (twice in one submission)", j.Name, ErrExists)
		}
		seen[key] = true
		if old, ok := q.byID[q.byName[key]]; ok && !old.State.Terminal() {
			return nil, fmt.Errorf("job %q: %w (%s is %s)", j.Name, ErrExists, old.ID, old.State)
		}
		j.Rev = 1
		out[i], keys[i], vals[i] = j, j.ID, j
	}
	if err := q.store.PutAll(keys, vals); err != nil {
		return nil, err
	}
	q.seq += uint64(len(out))
	for _, j := range out {
		q.byID[j.ID] = j
		q.byName[ownedName{j.Owner.UID, j.Name}] = j.ID
		q.publishLocked(Change{New: j})
	}
	q.rebuildLocked(out)
	return out, nil
}

// Update applies fn to a copy of the job, persists and publishes it. fn
// returning an error aborts with nothing changed.
func (q *Queue) Update(id string, fn func(*Job) error) (*Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	cur, ok := q.byID[id]
	if !ok {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	next := cur.clone()
	if err := fn(next); err != nil {
		return nil, err
	}
	if next.ID != cur.ID || next.Seq != cur.Seq || next.Name != cur.Name {
		return nil, fmt.Errorf("job %s: update may not change identity", id)
	}
	if cur.Apart && !next.State.Terminal() {
		return nil, fmt.Errorf("job %q: finished, its command kept apart: it cannot be %s again", next.Name, next.State)
	}
	next.Rev = cur.Rev + 1
	if err := q.putApartLocked(next); err != nil {
		return nil, fmt.Errorf("job %q: %w", next.Name, err)
	}
	if err := q.store.Put(next.ID, next); err != nil {
		if next.Apart && !cur.Apart {
			q.whole.Remove(next.ID)
		}
		return nil, fmt.Errorf("job %q: %w", next.Name, err)
	}
	q.byID[id] = next
	v := slices.Clone(q.View())
	if i, ok := slices.BinarySearchFunc(v, next.Seq, func(j *Job, s uint64) int { return cmpSeq(j.Seq, s) }); ok {
		v[i] = next
	}
	q.storeLocked(v, []*Job{cur}, []*Job{next})
	q.publishLocked(Change{Old: cur, New: next})
	return next, nil
}

// admitLocked asks admit about each owner of jobs, in uid order.
func (q *Queue) admitLocked(jobs []*Job, admit func(uid uint32, unfinished, adding int) error) error {
	adding := map[uint32]int{}
	for _, j := range jobs {
		adding[j.Owner.UID]++
	}
	unfinished := map[uint32]int{}
	for _, j := range q.byID {
		if _, ok := adding[j.Owner.UID]; ok && !j.State.Terminal() {
			unfinished[j.Owner.UID]++
		}
	}
	for _, uid := range slices.Sorted(maps.Keys(adding)) {
		if err := admit(uid, unfinished[uid], adding[uid]); err != nil {
			return err
		}
	}
	return nil
}

// rebuildLocked publishes a view with added appended (their Seqs are the
// highest).
func (q *Queue) rebuildLocked(added []*Job) {
	q.storeLocked(append(slices.Clone(q.View()), added...), nil, added)
}

func (q *Queue) publishLocked(c Change) {
	if q.onChange != nil {
		q.onChange(c)
	}
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// IsID reports whether s has the form of a job id: "j" and digits.
func IsID(s string) bool {
	if len(s) < 2 || s[0] != 'j' {
		return false
	}
	for _, c := range s[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
