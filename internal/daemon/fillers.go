package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpusched/gpusched/internal/memfill"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/store"
)

// fillerHelper is what the daemon needs of a filler's helper process.
type fillerHelper interface {
	PID() int
	StartTime() uint64
	ChunkMiB() uint64
	State() memfill.State
	Set(ctx context.Context, targetMiB, reserveMiB uint64) (memfill.State, error)
	Release(ctx context.Context) error
	Detach() error
	Done() <-chan struct{}
}

// fillerRecord is a filler as persisted under <state-dir>/fillers, one file
// per GPU UUID, so that a restarted daemon re-adopts its helper.
type fillerRecord struct {
	UUID      string          `json:"uuid"`
	Owner     proctable.Owner `json:"owner"`
	Ratio     float64         `json:"ratio,omitempty"`
	TargetMiB uint64          `json:"target_mib"`
	Process   string          `json:"process,omitempty"` // record id of the attached process
	Session   bool            `json:"session,omitempty"`
	PID       int             `json:"pid"`
	Start     uint64          `json:"start"`
	Socket    string          `json:"socket"`
	CreatedAt time.Time       `json:"created_at"`
}

// filler is one GPU's filler. mu serialises what is sent to its helper,
// so that a reserve computed earlier never overwrites a later hand-over.
type filler struct {
	// mu is held by each operation on the filler, across its exchanges
	// with the helper (up to fillerTimeout each) and its writes to disk;
	// those who only read it read seen.
	mu      sync.Mutex
	seen    atomic.Pointer[fillerSeen]
	rec     fillerRecord
	helper  fillerHelper      // nil while it is being (re)started
	sent    [2]uint64         // target and reserve last applied
	pending map[uint64]uint64 // hand-overs in progress: token -> MiB
	err     string            // the last failure to drive the helper
	// released is set once releaseFiller has forgotten it: whoever still
	// holds the pointer (the filler loop's earlier list) leaves it alone.
	released bool
}

// fillerSeen is a filler as of the end of the last operation on it: what
// status, the metrics and placement show, so that no caller waits on an
// operation in progress on another user's filler.
type fillerSeen struct {
	rec    fillerRecord
	helper fillerHelper
	sent   [2]uint64
	err    string
}

func newFiller(rec fillerRecord) *filler {
	f := &filler{rec: rec, pending: map[uint64]uint64{}}
	f.seen.Store(&fillerSeen{rec: rec})
	return f
}

// unlock shows what f now is to its readers and unlocks f.mu.
func (f *filler) unlock() {
	f.seen.Store(&fillerSeen{rec: f.rec, helper: f.helper, sent: f.sent, err: f.err})
	f.mu.Unlock()
}

// look returns f as of the end of its last operation, without waiting for
// one in progress.
func (f *filler) look() *fillerSeen { return f.seen.Load() }

// reservePending is the memory promised to hand-overs in progress.
func (f *filler) reservePending() uint64 {
	var n uint64
	for _, mib := range f.pending {
		n += mib
	}
	return n
}

// fillerSet holds every GPU's filler, at most one per GPU.
type fillerSet struct {
	mu    sync.Mutex
	byGPU map[string]*filler
	store *store.Records
	token uint64
	kicks chan struct{}
}

func newFillerSet() *fillerSet {
	return &fillerSet{byGPU: map[string]*filler{}, kicks: make(chan struct{}, 1)}
}

// kick asks the filler loop to bring every filler up to date.
func (s *fillerSet) kick() {
	select {
	case s.kicks <- struct{}{}:
	default:
	}
}

func (s *fillerSet) get(uuid string) *filler {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGPU[uuid]
}

// all lists the fillers (unordered).
func (s *fillerSet) all() []*filler {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*filler, 0, len(s.byGPU))
	for _, f := range s.byGPU {
		out = append(out, f)
	}
	return out
}

// add registers f unless its GPU has a filler already; it returns the one
// in place then.
func (s *fillerSet) add(f *filler) (*filler, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.byGPU[f.rec.UUID]; old != nil {
		return old, false
	}
	s.byGPU[f.rec.UUID] = f
	return f, true
}

// remove forgets f if it is still its GPU's filler.
func (s *fillerSet) remove(f *filler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byGPU[f.rec.UUID] == f {
		delete(s.byGPU, f.rec.UUID)
	}
}

// nextToken names one hand-over.
func (s *fillerSet) nextToken() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token++
	return s.token
}

// pids maps each helper's pid to its GPU UUID, so that samples do not
// count fillers as external processes.
func (s *fillerSet) pids() map[int]string {
	out := map[int]string{}
	for _, f := range s.all() {
		seen := f.look()
		if seen.helper != nil {
			out[seen.helper.PID()] = seen.rec.UUID
		} else if seen.rec.PID > 0 {
			out[seen.rec.PID] = seen.rec.UUID
		}
	}
	return out
}
