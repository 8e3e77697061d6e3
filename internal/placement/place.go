package placement

import (
	"slices"
	"time"
)

// Place decides, for one snapshot, which queued jobs start now, on which
// GPUs and after which preemptions, and why each of the others waits. It is
// pure: the same input gives the same Plan, whatever the order of
// snap.GPUs, their occupants or queue. Stages, per job in placement order
// (see order): feasibility, health filters, best fit, preemption, the wait
// reason, and for a starving job a reservation.
func Place(snap Snapshot, queue []Job) Plan {
	p := &pass{
		opt:             snap.Options,
		now:             snap.Now,
		gpus:            newGPUs(snap),
		shapes:          map[string]int{},
		infeasibleCache: map[shapeKey]string{},
		waits:           map[shapeKey]Wait{},
		failed:          map[failKey]bool{},
	}
	p.view = make([]skip, len(p.gpus))
	plan := Plan{Starts: []Start{}, Waits: []Wait{}, Infeasible: []Wait{}}
	for _, j := range order(queue, snap.Now, snap.Options.AgingStep) {
		p.look(j)
		if why := p.infeasible(j); why != "" {
			plan.Infeasible = append(plan.Infeasible, Wait{JobID: j.ID, Reason: ReasonInfeasible, Detail: why})
			continue
		}
		if s, ok := p.place(j); ok {
			plan.Starts = append(plan.Starts, s)
			continue
		}
		plan.Waits = append(plan.Waits, p.wait(j))
		if p.starving(j) {
			p.reserve(j)
		}
	}
	return plan
}

// pass is the state of one Place call.
type pass struct {
	opt  Options
	now  time.Time
	gpus []gpuState

	// How the current job sees the GPUs (set by look).
	lim   limits
	view  []skip // per GPU: outside its Only list, or the health outcome
	shape int    // view, interned

	shapes          map[string]int
	infeasibleCache map[shapeKey]string // never stale: feasibility is static
	waits           map[shapeKey]Wait   // valid until the state changes
	failed          map[failKey]bool    // preemptions found impossible, likewise

	scratch     []int
	viewBytes   []byte
	sums, costs []uint64 // for exact
}

// shapeKey is what a job's outcome depends on, its priority aside.
type shapeKey struct {
	gpus  int
	vram  uint64
	shape int
	lim   limits
}

// failKey is a shape with a base priority, for preemption.
type failKey struct {
	shapeKey
	priority int
}

// look sets how j sees the GPUs.
func (p *pass) look(j *Job) {
	p.lim = limitsFor(p.opt, j)
	for i := range p.gpus {
		if within(j, &p.gpus[i]) {
			p.view[i] = p.lim.check(&p.gpus[i])
		} else {
			p.view[i] = outside
		}
	}
	b := p.viewBytes[:0]
	for _, v := range p.view {
		b = append(b, byte(v))
	}
	p.viewBytes = b
	id, ok := p.shapes[string(b)] // a lookup that does not allocate
	if !ok {
		id = len(p.shapes)
		p.shapes[string(b)] = id
	}
	p.shape = id
}

// key is j's shape.
func (p *pass) key(j *Job) shapeKey {
	return shapeKey{gpus: j.GPUs, vram: j.VRAMMiB, shape: p.shape, lim: p.lim}
}

// place starts j now, by best fit or else by preemption, if it can.
func (p *pass) place(j *Job) (Start, bool) {
	if gs := p.bestFit(j); gs != nil {
		p.start(j, gs)
		return Start{JobID: j.ID, GPUs: p.uuids(gs)}, true
	}
	k := failKey{p.key(j), j.Priority}
	if p.failed[k] {
		return Start{}, false
	}
	pr, ok := p.preempt(j)
	if !ok {
		p.failed[k] = true
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

// changed drops what the pass learned about the state, after a start or a
// reservation.
func (p *pass) changed() {
	clear(p.waits)
	clear(p.failed)
}
