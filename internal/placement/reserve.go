package placement

import (
	"cmp"
	"slices"
)

// starving reports whether j has waited at least StarveAfter.
func (p *pass) starving(j *Job) bool {
	return p.opt.StarveAfter > 0 && p.now.Sub(j.QueuedAt) >= p.opt.StarveAfter
}

// reserve holds GPUs for the starving job j, which could not start: the
// j.GPUs GPUs not held already, in its Only list, not banned and able to
// fit it some day, where it would fit soonest: those with the most room
// once the non-permanent holders go (headroom plus their charges), ties by
// lower Index. Later jobs in the pass may not start there. Transient
// health filters do not count; with too few GPUs left it holds none.
func (p *pass) reserve(j *Job) {
	var gs []int
	for i := range p.gpus {
		if g := &p.gpus[i]; p.view[i] != outside && !g.banned && g.reservedBy == "" && p.ever(j, g) {
			gs = append(gs, i)
		}
	}
	if len(gs) < j.GPUs {
		return
	}
	slices.SortStableFunc(gs, func(a, b int) int {
		ga, gb := &p.gpus[a], &p.gpus[b]
		return cmp.Compare(gb.headroom()+gb.nonPerm, ga.headroom()+ga.nonPerm)
	})
	for _, i := range gs[:j.GPUs] {
		p.gpus[i].reservedBy = j.ID
	}
	p.gen++
}

// ever reports whether j could fit on g once everything non-permanent is
// gone.
func (p *pass) ever(j *Job, g *gpuState) bool {
	if j.VRAMMiB == 0 {
		return !g.permanent
	}
	return g.capacity >= p.need(j)
}
