package placement

import (
	"cmp"
	"fmt"
	"slices"
)

// infeasible says why j can never start on this machine, whatever goes
// away, or "" when it might. Only permanent occupants, banned GPUs and the
// job's Only list count: the other health filters are transient.
func (p *pass) infeasible(j *Job) string {
	switch {
	case j.GPUs < 1:
		return fmt.Sprintf("asks for %d GPUs", j.GPUs)
	case j.GPUs > len(p.gpus):
		return fmt.Sprintf("needs %s; the machine has %d", gpusN(j.GPUs), len(p.gpus))
	case j.Pinned && len(j.Only) != j.GPUs:
		return fmt.Sprintf("pinned to %s but needs %d", gpusN(len(j.Only)), j.GPUs)
	}
	if j.Pinned {
		for _, u := range j.Only {
			if !slices.ContainsFunc(p.gpus, func(g gpuState) bool { return g.uuid == u }) {
				return fmt.Sprintf("pinned to %s, which is not on this machine", u)
			}
		}
	}
	return p.shortfall(j)
}

// shortfall compares what j needs with the most the usable GPUs can ever
// offer.
func (p *pass) shortfall(j *Job) string {
	var caps []uint64 // capacities of the GPUs j may ever use
	idle := 0         // of those, GPUs without a permanent occupant
	for i := range p.gpus {
		if g := &p.gpus[i]; p.view[i] != outside && !g.banned {
			caps = append(caps, g.capacity)
			if !g.permanent {
				idle++
			}
		}
	}
	if len(caps) < j.GPUs {
		return fmt.Sprintf("needs %s; only %d may be used (the rest are banned or outside its Only list)", gpusN(j.GPUs), len(caps))
	}
	if j.VRAMMiB == 0 {
		if idle < j.GPUs {
			return fmt.Sprintf("needs %s; only %d can ever be idle (the rest hold permanent reserves)", wholeN(j.GPUs), idle)
		}
		return ""
	}
	slices.SortFunc(caps, func(a, b uint64) int { return cmp.Compare(b, a) })
	if best := caps[j.GPUs-1]; best < p.need(j) {
		if j.GPUs == 1 {
			return fmt.Sprintf("needs %d+%d MiB on 1 GPU; the most it can ever get is %d MiB", j.VRAMMiB, p.opt.MarginMiB, best)
		}
		return fmt.Sprintf("needs %d+%d MiB on %d GPUs; the most it can ever get on %d GPUs is %d MiB each",
			j.VRAMMiB, p.opt.MarginMiB, j.GPUs, j.GPUs, best)
	}
	return ""
}

// gpusN is "1 GPU" or "n GPUs".
func gpusN(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return fmt.Sprintf("%d GPUs", n)
}

// wholeN is "1 whole idle GPU" or "n whole idle GPUs".
func wholeN(n int) string {
	if n == 1 {
		return "1 whole idle GPU"
	}
	return fmt.Sprintf("%d whole idle GPUs", n)
}
