package placement

import (
	"encoding/binary"
	"math"
	"slices"
	"time"
)

// Place decides, for one snapshot, which queued jobs start now, on which
// GPUs and after which preemptions, and why each of the others waits. It is
// pure: the same input gives the same Plan, whatever the order of
// snap.GPUs, their occupants or queue. Stages, per job in placement order
// (see order): feasibility, filters, best fit, preemption, the wait
// reason, and for a starving job a reservation.
func Place(snap Snapshot, queue []Job) Plan {
	p := &pass{
		opt:    snap.Options,
		now:    snap.Now,
		gpus:   newGPUs(snap),
		views:  map[string]int{},
		shapes: map[shapeKey]*shape{},
	}
	plan := Plan{Starts: []Start{}, Waits: make([]Wait, 0, len(queue)), Infeasible: []Wait{}}
	for _, j := range order(queue, snap.Served, snap.Now, snap.Options.AgingStep) {
		p.look(j)
		s := p.shape(j)
		if s.infeasible != "" {
			plan.Infeasible = append(plan.Infeasible, Wait{JobID: j.ID, Reason: ReasonInfeasible, Detail: s.infeasible})
			continue
		}
		if st, ok := p.place(j, s); ok {
			plan.Starts = append(plan.Starts, st)
			continue
		}
		if !s.waited {
			s.wait, s.waited = p.explain(j), true
		}
		plan.Waits = append(plan.Waits, Wait{JobID: j.ID, Reason: s.wait.Reason, Detail: s.wait.Detail})
		if p.starving(j) {
			p.reserve(j)
		}
	}
	for i := range p.gpus {
		if g := &p.gpus[i]; g.reservedBy != "" {
			if plan.Reserved == nil {
				plan.Reserved = map[string]string{}
			}
			plan.Reserved[g.uuid] = g.reservedBy
		}
	}
	return plan
}

// pass is the state of one Place call.
type pass struct {
	opt  Options
	now  time.Time
	gpus []gpuState
	gen  int // bumped whenever a start or a reservation changes the state

	// How the current job sees the GPUs (set by look).
	lim    limits
	view   []skip // per GPU: outside its Only list, or the health outcome
	viewID int    // view and lim, interned

	plain       []skip // the view of a job with no Only list and no limits of its own
	plainLim    limits
	plainID     int
	views       map[string]int
	shapes      map[shapeKey]*shape
	scratch     []int
	key         []byte
	sums, costs []uint64 // for exact
}

// shapeKey is what a job's outcome depends on, its priority aside.
type shapeKey struct {
	gpus   int
	vram   uint64
	viewID int
	owner  string // whose processes it may preempt, unless any
	any    bool
}

// shape is what the pass learned about the jobs of one shape: their
// infeasibility for the whole pass, the rest until the state changes.
type shape struct {
	infeasible string // "" when feasible
	gen        int    // the state generation of the fields below
	waited     bool
	wait       Wait // their reason to wait, JobID aside
	failed     bool // preemption fails for base priorities <= failedAt (fewer victims)
	failedAt   int
}

// look sets how j sees the GPUs.
func (p *pass) look(j *Job) {
	plain := len(j.Only) == 0 && j.MinFreeMiB == 0 && j.MaxUtilPercent == 0 && j.MaxPowerWatts == 0 && j.MaxTempC == 0
	if plain && p.plain != nil {
		p.lim, p.view, p.viewID = p.plainLim, p.plain, p.plainID
		return
	}
	p.lim = limitsFor(p.opt, j)
	p.view = make([]skip, len(p.gpus))
	b := p.key[:0]
	for i := range p.gpus {
		p.view[i] = outside
		if within(j, &p.gpus[i]) {
			p.view[i] = p.lim.check(&p.gpus[i])
		}
		b = append(b, byte(p.view[i]))
	}
	b = binary.LittleEndian.AppendUint64(b, p.lim.minFree)
	b = binary.LittleEndian.AppendUint64(b, uint64(p.lim.maxUtil))
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.lim.maxPower))
	b = binary.LittleEndian.AppendUint64(b, uint64(p.lim.maxTemp))
	p.key = b
	id, ok := p.views[string(b)] // a lookup that does not allocate
	if !ok {
		id = len(p.views)
		p.views[string(b)] = id
	}
	p.viewID = id
	if plain {
		p.plain, p.plainLim, p.plainID = p.view, p.lim, id
	}
}

// shape is what the pass knows about j's shape, valid for the current
// state.
func (p *pass) shape(j *Job) *shape {
	if j.Pinned { // its verdict depends on its Only list itself
		return &shape{infeasible: p.infeasible(j), gen: p.gen}
	}
	k := shapeKey{gpus: j.GPUs, vram: j.VRAMMiB, viewID: p.viewID, any: j.PreemptAny}
	if !j.PreemptAny {
		k.owner = j.Owner
	}
	s := p.shapes[k]
	if s == nil {
		s = &shape{infeasible: p.infeasible(j), gen: p.gen}
		p.shapes[k] = s
	}
	if s.gen != p.gen {
		*s = shape{infeasible: s.infeasible, gen: p.gen}
	}
	return s
}

// place starts j now, by best fit or else by preemption, if it can.
func (p *pass) place(j *Job, s *shape) (Start, bool) {
	if gs := p.bestFit(j); gs != nil {
		p.start(j, gs)
		return Start{JobID: j.ID, GPUs: p.uuids(gs)}, true
	}
	if s.failed && j.Priority <= s.failedAt {
		return Start{}, false
	}
	pr, ok := p.preempt(j)
	if !ok {
		if !s.failed || j.Priority > s.failedAt {
			s.failed, s.failedAt = true, j.Priority
		}
		return Start{}, false
	}
	ids := make([]string, len(pr.victims))
	for k, v := range pr.victims {
		p.freeze(v)
		ids[k] = v.id
	}
	slices.Sort(ids)
	p.byHeadroom(pr.gpus)
	p.start(j, pr.gpus)
	return Start{JobID: j.ID, GPUs: p.uuids(pr.gpus), Preempt: ids}, true
}
