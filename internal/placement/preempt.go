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
// already fits cost nothing). Each reachable GPU in turn seeds the choice,
// which then grows by the GPU that costs least given the victims chosen so
// far, so that one victim on several GPUs counts once. ok is false when too
// few GPUs can be made to fit.
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
	for k, seed := range gs {
		if pr := p.grow(j, gs, seed); k == 0 || pr.cost < best.cost {
			best = pr
		}
	}
	return best, true
}

// grow completes a preemption from the seed GPU among the reachable gs.
// Every GPU of gs stays reachable whatever victims are chosen: they only
// free more.
func (p *pass) grow(j *Job, gs []int, seed int) preemption {
	vs, _, _ := p.cheapest(j, seed, nil)
	pr := preemption{gpus: []int{seed}, victims: vs}
	for len(pr.gpus) < j.GPUs {
		next, nextVs, nextCost := -1, []*proc(nil), uint64(0)
		for _, i := range gs {
			if slices.Contains(pr.gpus, i) {
				continue
			}
			if vs, c, _ := p.cheapest(j, i, pr.victims); next < 0 || c < nextCost {
				next, nextVs, nextCost = i, vs, c
			}
		}
		pr.gpus = append(pr.gpus, next)
		pr.victims = append(pr.victims, nextVs...)
	}
	for _, v := range pr.victims {
		pr.cost += v.total
	}
	return pr
}

// candidates lists the stakes on GPU i that j may freeze besides the
// chosen victims, and how many MiB of them must go for j to fit there (0:
// it fits already; undeclared: all of them). ok is false when freezing all
// of them would not do.
func (p *pass) candidates(j *Job, i int, chosen []*proc) (cands []stake, deficit uint64, ok bool) {
	g := &p.gpus[i]
	var freed, sum uint64
	holders := g.holdersFor(j.Owner)
	for _, s := range g.stakes {
		switch {
		case s.p.gone:
		case slices.Contains(chosen, s.p):
			freed += s.charge
			holders--
		case s.p.priority < j.Priority && (j.PreemptAny || s.p.owner == j.Owner):
			cands = append(cands, s)
			sum += s.charge
		}
	}
	if j.VRAMMiB == 0 {
		return cands, sum, holders == len(cands) && g.unattributed <= p.opt.MarginMiB
	}
	deficit = sub(sub(g.load-freed, g.fills[j.Owner].mib)+p.need(j), g.total)
	return cands, deficit, sum >= deficit
}

// cheapest is the victim set of least cost that lets j fit on GPU i,
// given the chosen victims: exact up to maxExact candidates, else greedy.
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

// greedy takes the largest stakes until one alone covers what is left,
// then the smallest such. (Dropping stakes afterwards could never help:
// each one taken is at least as large as any taken after it.) cands must
// free enough in all.
func greedy(cands []stake, deficit uint64) []stake {
	left := slices.Clone(cands)
	slices.SortStableFunc(left, func(a, b stake) int { return cmp.Compare(a.charge, b.charge) })
	var pick []stake
	for {
		if k := slices.IndexFunc(left, func(s stake) bool { return s.charge >= deficit }); k >= 0 {
			return append(pick, left[k])
		}
		last := left[len(left)-1]
		pick, left, deficit = append(pick, last), left[:len(left)-1], deficit-last.charge
	}
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
