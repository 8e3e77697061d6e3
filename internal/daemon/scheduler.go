package daemon

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/placement"
)

// scheduler is the dispatch loop's state: what wakes it, why each queued
// job waits, and what it observed of running jobs between passes.
type scheduler struct {
	kicks   chan struct{}
	dirty   atomic.Bool                 // something placement reads changed since the last pass began
	reasons atomic.Pointer[waitReasons] // why each queued job waited in the last pass
	passes  atomic.Uint64
	// queue is the last pass's queue, whose array the next reuses: passes
	// run one at a time, and a long queue is megabytes a pass.
	queue []placement.Job

	mu        sync.Mutex
	peaks     map[string]map[string]uint64 // process record id -> GPU UUID -> peak MiB
	extPeaks  map[int]map[string]uint64    // external pid -> GPU UUID -> peak MiB
	warned    map[string]bool              // record ids told they went past their declaration
	launching map[string]bool              // job ids whose attempt is being started
	resuming  map[string]bool              // keys (String) of preempted processes being thawed back
	timers    map[string]*time.Timer       // job id -> timeout of its current attempt
	served    map[string]time.Time         // user -> when a job or lease of theirs last started, or a thaw was admitted
}

func newScheduler() *scheduler {
	s := &scheduler{kicks: make(chan struct{}, 1), peaks: map[string]map[string]uint64{},
		extPeaks: map[int]map[string]uint64{}, warned: map[string]bool{}, launching: map[string]bool{},
		resuming: map[string]bool{}, timers: map[string]*time.Timer{}, served: map[string]time.Time{}}
	s.reasons.Store(&waitReasons{})
	return s
}

// Serve records that user was given something now: a job or a lease of
// theirs started, or a thaw admitted. Placement's round-robin, and the
// thaw queue's, put the user given something least recently first.
func (s *scheduler) Serve(user string) {
	s.mu.Lock()
	s.served[user] = time.Now()
	s.mu.Unlock()
}

// Last is when user was last given something (zero: never).
func (s *scheduler) Last(user string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[user]
}

// kick asks for a placement pass now, something having changed; kicks
// while one is due coalesce.
func (s *scheduler) kick() {
	s.dirty.Store(true)
	s.wake()
}

// sampled tells the loop a GPU sample came: it places again only if the
// sample differs, for placement, from the last pass's (see schedidle.go).
func (s *scheduler) sampled() { s.wake() }

func (s *scheduler) wake() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

// waitReasons is why the queued requests waited in a pass.
type waitReasons struct {
	waits    []placement.Wait          // a job's or a lease's own, as the pass gave them
	byOwner  map[uint32]placement.Wait // all the queued jobs of a user at their process cap
	reserved map[string]string         // GPU UUID -> the starving request holding it (Plan.Reserved)
	started  map[string]bool           // waiting thaws (placement IDs) the pass kept room for

	// byID indexes waits, built at the first lookup: a pass over 10,000
	// queued jobs spent a fifth of its time building it for every pass.
	once sync.Once
	byID map[string]placement.Wait
}

// of is the wait of a job or a lease, by placement's job id.
func (r *waitReasons) of(id string) (placement.Wait, bool) {
	r.once.Do(func() {
		r.byID = make(map[string]placement.Wait, len(r.waits))
		for _, w := range r.waits {
			r.byID[w.JobID] = w
		}
	})
	w, ok := r.byID[id]
	return w, ok
}

// reason is why queued job j waited in the last pass.
func (s *scheduler) reason(j *jobqueue.Job) string {
	r := s.reasons.Load()
	w, ok := r.of(j.ID)
	if !ok {
		w, ok = r.byOwner[j.Owner.UID]
	}
	if !ok {
		return ""
	}
	return waitWords(w)
}

// waitWords says why a request waits: "no_memory: needs ...".
func waitWords(w placement.Wait) string { return string(w.Reason) + ": " + w.Detail }

// peaksOf is the peak memory per GPU observed for a process record.
func (s *scheduler) peaksOf(recID string) map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.peaks[recID])
}

// setBusy marks key in m (launching or resuming) and reports whether it
// was free.
func (s *scheduler) setBusy(m map[string]bool, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m[key] {
		return false
	}
	m[key] = true
	return true
}

func (s *scheduler) clearBusy(m map[string]bool, key string) {
	s.mu.Lock()
	delete(m, key)
	s.mu.Unlock()
}

func (s *scheduler) busy(m map[string]bool, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[key]
}

// runScheduler runs a placement pass whenever something that can change
// placement happens (exit, freeze, thaw, submit, cancel, lease release, a
// GPU sample that differs), paced to a share of a CPU (passPace), until
// ctx ends.
func (d *Daemon) runScheduler(ctx context.Context) {
	defer d.stopJobTimers()
	var idle idleState
	var pace passPace
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.sched.kicks:
		}
		if rest := pace.wait(time.Now()); rest > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(rest):
			}
		}
		if !d.needPass(&idle, time.Now()) {
			continue
		}
		start := time.Now()
		pace.placed(d.schedulePass(ctx), time.Now())
		d.sched.passes.Add(1)
		if el := time.Since(start); el > 100*time.Millisecond {
			d.log.Warn("slow placement pass", zap.Duration("took", el))
		}
	}
}
