// Package thawqueue admits thaws to GPU memory. It holds what admitted
// thaws will take until their memory shows in a GPU sample, so that two
// thaws never count the same free memory, and it serves the thaws that
// wait for memory in turn: priority (descending), then round-robin between
// owners (each owner's k-th waiting thaw, by arrival, in round k; within a
// round, the owner served least recently first, as the caller's Served
// says, thaws admitted and the caller's other work counted), then arrival.
// So one owner's many waiting thaws let each other owner's through one for
// one, whoever came first. Each time memory may have freed (a new sample) and
// each time a thaw arrives, the waiting thaws are walked in that order and
// every one that fits is admitted, its memory counted before the next is
// looked at; one that does not fit lets later, smaller ones through
// (backfill) until it has waited holdAfter, when it holds its GPUs: no
// later thaw, waiting or not, is admitted there before it.
package thawqueue

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// GPUs is the latest GPU sample, as the queue reads it.
type GPUs interface {
	// Device is a GPU's total and used MiB and its index; ok is false when
	// the sample lacks it.
	Device(uuid string) (totalMiB, usedMiB uint64, index int, ok bool)
	// Held is the MiB of the GPU that others hold and have not used yet
	// (leases, jobs' declarations), which a thaw r may not have; r's own
	// process's part is left out.
	Held(uuid string, r Request) uint64
	// Yield is the MiB uid's own filler on the GPU would hand over to a
	// thaw of uid's.
	Yield(uuid string, uid uint32) uint64
	// Reserved names the queued work, starving for the GPU, that holds it
	// against a thaw r, the seq-th to arrive (0: one only asked about; ""
	// when nothing does, it is r's own, or r may go first).
	Reserved(uuid string, r Request, seq uint64) string
}

// Served is when each owner was last given room on the GPUs, kept by the
// caller with its other work (placement's jobs and leases), so that one
// order holds between owners. The queue records each thaw it admits.
type Served interface {
	Last(owner string) time.Time // zero: never
	Serve(owner string)
}

// Request is one thaw's claim.
type Request struct {
	UID      uint32
	Owner    string // for humans, in a held GPU's sentence
	Proc     string // the process thawed, whose own holds do not count against it
	Line     uint64 // its place in the caller's own line, kept for Pause's list
	Priority int
	Need     map[string]uint64 // MiB per GPU UUID
}

// Queue admits thaws. Its zero value is not usable; see New.
type Queue struct {
	look      func() GPUs
	margin    uint64
	holdAfter time.Duration
	waits     func()
	served    Served
	now       func() time.Time

	mu       sync.Mutex
	reserved map[string]uint64 // GPU UUID -> MiB held by admitted thaws
	waiting  []*waiter         // by arrival
	seq      uint64
}

// New returns a queue reading the latest sample through look, asking
// margin MiB free beyond each thaw's need; a thaw that has waited
// holdAfter holds its GPUs (0: never). waits, when not nil, is called
// each time a thaw begins to wait; served orders owners within a round.
func New(look func() GPUs, margin uint64, holdAfter time.Duration, waits func(), served Served) *Queue {
	return &Queue{look: look, margin: margin, holdAfter: holdAfter, waits: waits, served: served, now: time.Now, reserved: map[string]uint64{}}
}

// waiter is one thaw in the walk: waiting, or arrived and being looked at.
type waiter struct {
	req   Request
	seq   uint64
	since time.Time
	ready chan struct{} // closed once admitted or failed
	done  bool          // admitted (err nil) or failed
	err   error         // a GPU missing from the sample
	short string        // why it did not fit at the last walk
}

// Admit reserves r.Need once every GPU has it free beyond the margin and
// no thaw ahead holds the GPU, counting what r.UID's fillers would hand
// over as free. With wait 0 it answers at once; otherwise it waits up to
// wait, in turn, until ctx ends. The returned func releases the
// reservation. Its errors are *NoRoom (Expired once it waited all of
// wait), *Missing, or ctx's.
func (q *Queue) Admit(ctx context.Context, r Request, wait time.Duration) (func(), error) {
	q.mu.Lock()
	q.seq++
	w := &waiter{req: r, seq: q.seq, since: q.now(), ready: make(chan struct{})}
	q.waiting = append(q.waiting, w)
	q.walk()
	if w.done || wait == 0 {
		defer q.mu.Unlock()
		return q.outcome(w, false)
	}
	q.mu.Unlock()
	if q.waits != nil {
		q.waits()
	}

	t := time.NewTimer(wait)
	defer t.Stop()
	expired := false
	select {
	case <-w.ready:
	case <-t.C:
		expired = true
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !w.done && !expired {
		q.drop(w)
		return nil, ctx.Err()
	}
	return q.outcome(w, expired)
}

// outcome ends w's wait: its release when admitted, else why not. Callers
// hold q.mu.
func (q *Queue) outcome(w *waiter, expired bool) (func(), error) {
	if !w.done {
		q.drop(w)
		return nil, &NoRoom{Why: w.short, Expired: expired}
	}
	if w.err != nil {
		return nil, w.err
	}
	var once sync.Once
	return func() { once.Do(func() { q.release(w.req.Need) }) }, nil
}

// drop takes w out of the walk. Callers hold q.mu.
func (q *Queue) drop(w *waiter) {
	if i := slices.Index(q.waiting, w); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
}

// Sampled walks the waiting thaws again: memory may have freed.
func (q *Queue) Sampled() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) > 0 {
		q.walk()
	}
}

// walk admits, in turn, every waiting thaw that fits, and fails those
// whose GPU is missing; they leave the walk. Callers hold q.mu.
func (q *Queue) walk() {
	gpus := q.look()
	now := q.now()
	held := map[string]*waiter{} // GPU UUID -> the thaw that holds it
	left := q.waiting[:0]
	for _, w := range q.inTurn() {
		short, err := q.shortfall(gpus, w.req, w.seq, held)
		switch {
		case err != nil:
			w.done, w.err = true, err
		case short == "":
			w.done = true
			q.served.Serve(w.req.Owner)
			for uuid, mib := range w.req.Need {
				q.reserved[uuid] += mib
			}
		default:
			w.short = short
			q.hold(held, w, now)
		}
		if w.done {
			close(w.ready)
			continue
		}
		left = append(left, w)
	}
	clear(q.waiting[len(left):])
	q.waiting = left
	slices.SortFunc(q.waiting, func(a, b *waiter) int { return cmp.Compare(a.seq, b.seq) })
}

// inTurn is the waiting thaws in the order they are served: priority,
// descending, then round-robin between owners (the owner served least
// recently first within a round), then arrival.
func (q *Queue) inTurn() []*waiter {
	type turn struct {
		w     *waiter
		round int
		last  time.Time // its owner's last service
	}
	turns := make([]turn, len(q.waiting))
	rounds := map[[2]int64]int{} // (priority, uid) -> waiters seen so far
	last := map[string]time.Time{}
	for i, w := range q.waiting {
		k := [2]int64{int64(w.req.Priority), int64(w.req.UID)}
		at, ok := last[w.req.Owner]
		if !ok {
			at = q.served.Last(w.req.Owner)
			last[w.req.Owner] = at
		}
		turns[i] = turn{w: w, round: rounds[k], last: at}
		rounds[k]++
	}
	slices.SortStableFunc(turns, func(a, b turn) int {
		if c := cmp.Compare(b.w.req.Priority, a.w.req.Priority); c != 0 {
			return c
		}
		if c := cmp.Compare(a.round, b.round); c != 0 {
			return c
		}
		if c := a.last.Compare(b.last); c != 0 {
			return c
		}
		return cmp.Compare(a.w.seq, b.w.seq)
	})
	out := make([]*waiter, len(turns))
	for i, t := range turns {
		out[i] = t.w
	}
	return out
}

// shortfall describes the GPUs (by index) that lack room for r (the
// seq-th thaw to arrive), or are held for another thaw or for starving
// queued work, or "" when all have it. A GPU missing from the sample is a
// *Missing error.
func (q *Queue) shortfall(gpus GPUs, r Request, seq uint64, held map[string]*waiter) (string, error) {
	var shorts []string
	for _, uuid := range slices.Sorted(maps.Keys(r.Need)) {
		total, used, index, ok := gpus.Device(uuid)
		if !ok {
			return "", &Missing{UUID: uuid}
		}
		if h := held[uuid]; h != nil {
			shorts = append(shorts, fmt.Sprintf("GPU %d is held for a thaw of %s's waiting since %s", index, h.req.Owner, h.since.Format(time.TimeOnly)))
			continue
		}
		if who := gpus.Reserved(uuid, r, seq); who != "" {
			shorts = append(shorts, fmt.Sprintf("GPU %d is held for %s", index, who))
			continue
		}
		promised := gpus.Held(uuid, r)
		avail := sub(total, used+promised+q.reserved[uuid]) + gpus.Yield(uuid, r.UID)
		if r.Need[uuid]+q.margin > avail {
			short := fmt.Sprintf("GPU %d needs %d MiB plus a %d MiB margin, %d MiB free", index, r.Need[uuid], q.margin, avail)
			if promised > 0 {
				short += fmt.Sprintf(" (%d MiB more is held by leases and jobs that have not used it yet)", promised)
			}
			shorts = append(shorts, short)
		}
	}
	return strings.Join(shorts, "; "), nil
}

// Fits reports whether r fits now, as a thaw arriving would, without
// reserving it.
func (q *Queue) Fits(r Request) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	short, err := q.shortfall(q.look(), r, 0, q.holds())
	return err == nil && short == ""
}

// holds is what waiting thaws hold now, none admitted. Callers hold q.mu.
func (q *Queue) holds() map[string]*waiter {
	held := map[string]*waiter{}
	now := q.now()
	for _, w := range q.inTurn() {
		q.hold(held, w, now)
	}
	return held
}

// hold records in held the GPUs w holds, not held already, once it has
// waited holdAfter.
func (q *Queue) hold(held map[string]*waiter, w *waiter, now time.Time) {
	if q.holdAfter == 0 || now.Sub(w.since) < q.holdAfter {
		return
	}
	for uuid := range w.req.Need {
		if held[uuid] == nil {
			held[uuid] = w
		}
	}
}

func (q *Queue) release(need map[string]uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for uuid, mib := range need {
		q.reserved[uuid] -= mib
		if q.reserved[uuid] == 0 {
			delete(q.reserved, uuid)
		}
	}
}

// Waiting is the number of thaws waiting for memory.
func (q *Queue) Waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.waiting)
}

// Waiter is a thaw waiting for memory, as Pause lists it.
type Waiter struct {
	Request
	Seq   uint64 // arrival, unique
	Since time.Time
}

// Pause stops admissions until resume is called, for a caller that places
// other work on the GPUs against what thaws hold. It returns what admitted
// thaws hold per GPU UUID until they finish and the thaws waiting, by
// arrival; no thaw is admitted, or begins to wait, until the caller has
// recorded what it placed and resumes.
func (q *Queue) Pause() (held map[string]uint64, waiting []Waiter, resume func()) {
	q.mu.Lock()
	waiting = make([]Waiter, len(q.waiting))
	for i, w := range q.waiting {
		waiting[i] = Waiter{Request: w.req, Seq: w.seq, Since: w.since}
		waiting[i].Need = maps.Clone(w.req.Need)
	}
	var once sync.Once
	return maps.Clone(q.reserved), waiting, func() { once.Do(q.mu.Unlock) }
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
