package placement

import (
	"cmp"
	"math"
	"slices"
)

// need is the headroom a declared job needs on each GPU: its declaration
// plus the margin.
func (p *pass) need(j *Job) uint64 {
	if n := j.VRAMMiB + p.opt.MarginMiB; n >= j.VRAMMiB {
		return n
	}
	return math.MaxUint64
}

// fits reports whether j could start on g now, filters aside: a declared
// job needs its need in headroom, an undeclared one a whole idle GPU (no
// holder with a charge, unattributed memory within the margin). The job's
// owner's fillers count as free memory.
func (p *pass) fits(j *Job, g *gpuState) bool {
	if j.VRAMMiB == 0 {
		return g.holdersFor(j.Owner) == 0 && g.unattributed <= p.opt.MarginMiB
	}
	return g.headroomFor(j.Owner) >= p.need(j)
}

// usable reports whether the current job may start on GPU i now: in its
// Only list, healthy, and not held for a starving job.
func (p *pass) usable(i int) bool {
	return p.view[i] == healthy && p.gpus[i].reservedBy == ""
}

// bestFit picks the j.GPUs usable GPUs where j fits with the least
// headroom (ties by lower Index), or nil when there are too few.
func (p *pass) bestFit(j *Job) []int {
	fit := p.scratch[:0]
	for i := range p.gpus {
		if p.usable(i) && p.fits(j, &p.gpus[i]) {
			fit = append(fit, i)
		}
	}
	p.scratch = fit
	if len(fit) < j.GPUs {
		return nil
	}
	p.byHeadroom(fit)
	return slices.Clone(fit[:j.GPUs])
}

// byHeadroom sorts GPU positions by headroom, least first, then Index.
func (p *pass) byHeadroom(gs []int) {
	slices.SortFunc(gs, func(a, b int) int {
		return cmp.Or(cmp.Compare(p.gpus[a].headroom(), p.gpus[b].headroom()), cmp.Compare(a, b))
	})
}

// start charges j on gs: its declaration, or the whole GPU when
// undeclared, so that later jobs in the pass see it; the owner's fillers
// there hand over what they can of it.
func (p *pass) start(j *Job, gs []int) {
	for _, i := range gs {
		g := &p.gpus[i]
		c := j.VRAMMiB
		if c == 0 {
			c = g.total
		}
		g.handOver(j.Owner, c)
		g.load += c
		g.nonPerm += c
		g.holders++
	}
	p.gen++
}

// uuids names GPU positions.
func (p *pass) uuids(gs []int) []string {
	out := make([]string, len(gs))
	for k, i := range gs {
		out[k] = p.gpus[i].uuid
	}
	return out
}
