package placement

import (
	"cmp"
	"math/bits"
	"slices"
)

// maxExact is the most candidates on one GPU for which the cheapest victim
// set is found by trying every subset; above it, greedily.
const maxExact = 12

// preemption makes room for a job: the GPUs it starts on and the processes
// to freeze first, cost MiB in all.
type preemption struct {
	gpus    []int
	victims []*proc
	cost    uint64
}

// preempt finds the cheapest preemption that lets j start now: victims are
// preemptible managed processes of lower base priority on GPUs j may use,
// and the cost is the MiB they hold over all their GPUs (GPUs where j
// already fits cost nothing). Each usable GPU in turn seeds the choice,
// which then grows by the GPU that costs least given the victims chosen so
// far, so that one victim on several GPUs counts once. ok is false when no
// preemption makes j fit.
func (p *pass) preempt(j *Job) (best preemption, ok bool) {
	var gs []int
	for i := range p.gpus {
		if !p.usable(i) {
			continue
		}
		if _, _, reach := p.candidates(j, i, nil); reach {
			gs = append(gs, i)
		}
	}
	if len(gs) < j.GPUs {
		return best, false
	}
	for _, seed := range gs {
		if pr, found := p.grow(j, gs, seed); found && (!ok || pr.cost < best.cost) {
			best, ok = pr, true
		}
	}
	return best, ok
}

// grow completes a preemption from the seed GPU among gs.
func (p *pass) grow(j *Job, gs []int, seed int) (preemption, bool) {
	vs, _, ok := p.cheapest(j, seed, nil)
	if !ok {
		return preemption{}, false
	}
	pr := preemption{gpus: []int{seed}, victims: vs}
	for len(pr.gpus) < j.GPUs {
		next, nextVs, nextCost := -1, []*proc(nil), uint64(0)
		for _, i := range gs {
			if slices.Contains(pr.gpus, i) {
				continue
			}
			if vs, c, ok := p.cheapest(j, i, pr.victims); ok && (next < 0 || c < nextCost) {
				next, nextVs, nextCost = i, vs, c
			}
		}
		if next < 0 {
			return preemption{}, false
		}
		pr.gpus = append(pr.gpus, next)
		pr.victims = append(pr.victims, nextVs...)
	}
	for _, v := range pr.victims {
		pr.cost += v.total
	}
	return pr, true
}

// candidates lists the stakes on GPU i that j may freeze besides the
// chosen victims, and how many MiB of them must go for j to fit there (0:
// it fits already; undeclared: all of them). ok is false when freezing all
// of them would not do.
func (p *pass) candidates(j *Job, i int, chosen []*proc) (cands []stake, deficit uint64, ok bool) {
	g := &p.gpus[i]
	var freed, sum uint64
	holders := g.holders
	for _, s := range g.stakes {
		switch {
		case s.p.gone:
		case slices.Contains(chosen, s.p):
			freed += s.charge
			holders--
		case s.p.priority < j.Priority:
			cands = append(cands, s)
			sum += s.charge
		}
	}
	if j.VRAMMiB == 0 {
		return cands, sum, holders == len(cands) && g.unattributed <= p.opt.MarginMiB
	}
	deficit = sub(g.load-freed+p.need(j), g.total)
	return cands, deficit, sum >= deficit
}

// cheapest is the victim set of least cost that lets j fit on GPU i,
// given the chosen victims: exact up to maxExact candidates, else largest
// first, then dropping those not needed.
func (p *pass) cheapest(j *Job, i int, chosen []*proc) (victims []*proc, cost uint64, ok bool) {
	cands, deficit, ok := p.candidates(j, i, chosen)
	if !ok || deficit == 0 {
		return nil, 0, ok
	}
	var pick []stake
	if len(cands) <= maxExact {
		pick = p.exact(cands, deficit)
	} else {
		pick = greedy(cands, deficit)
	}
	for _, s := range pick {
		victims = append(victims, s.p)
		cost += s.p.total
	}
	return victims, cost, true
}

// exact tries every subset of cands (in ID order) and returns the one that
// frees at least deficit at the least cost, then with the fewest victims.
func (p *pass) exact(cands []stake, deficit uint64) []stake {
	n := 1 << len(cands)
	if p.sums == nil {
		p.sums, p.costs = make([]uint64, 1<<maxExact), make([]uint64, 1<<maxExact)
	}
	best := -1
	for m := 1; m < n; m++ {
		low, prev := bits.TrailingZeros(uint(m)), m&(m-1)
		p.sums[m] = p.sums[prev] + cands[low].charge
		p.costs[m] = p.costs[prev] + cands[low].p.total
		if p.sums[m] >= deficit && (best < 0 || p.costs[m] < p.costs[best] ||
			p.costs[m] == p.costs[best] && bits.OnesCount(uint(m)) < bits.OnesCount(uint(best))) {
			best = m
		}
	}
	var pick []stake
	for k := range cands {
		if best&(1<<k) != 0 {
			pick = append(pick, cands[k])
		}
	}
	return pick
}

// greedy takes the largest stakes until deficit is freed, then drops the
// ones (largest first) it can do without. cands must free enough in all.
func greedy(cands []stake, deficit uint64) []stake {
	byCharge := slices.Clone(cands)
	slices.SortStableFunc(byCharge, func(a, b stake) int { return cmp.Compare(b.charge, a.charge) })
	var pick []stake
	var sum uint64
	for _, s := range byCharge {
		if sum >= deficit {
			break
		}
		pick = append(pick, s)
		sum += s.charge
	}
	return slices.DeleteFunc(pick, func(s stake) bool {
		if sum-s.charge >= deficit {
			sum -= s.charge
			return true
		}
		return false
	})
}

// freeze removes a victim's charges from every GPU it occupies.
func (p *pass) freeze(v *proc) {
	v.gone = true
	for _, i := range v.gpus {
		g := &p.gpus[i]
		for _, s := range g.stakes {
			if s.p != v {
				continue
			}
			g.load -= s.charge
			g.holders--
			if !s.permanent {
				g.nonPerm -= s.charge
			}
		}
	}
}
