package placement

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// explain says why j, feasible, does not start now: not enough room even
// counting the GPUs the health filters skip (no_memory, or no_idle_gpu when
// undeclared), else room only on skipped GPUs (unhealthy), else room only on
// GPUs held for starving jobs (reserved).
func (p *pass) explain(j *Job) Wait {
	var fit, healthyFit []int
	for i := range p.gpus {
		if p.view[i] != outside && p.fits(j, &p.gpus[i]) {
			fit = append(fit, i)
			if p.view[i] == healthy {
				healthyFit = append(healthyFit, i)
			}
		}
	}
	var b strings.Builder
	b.WriteString(p.needs(j))
	switch {
	case len(fit) < j.GPUs && j.VRAMMiB == 0:
		if len(fit) == 0 {
			b.WriteString("; none is idle")
		} else {
			b.WriteString("; idle now:")
			p.list(&b, fit, func(*gpuState) string { return "" })
		}
		return Wait{Reason: ReasonNoIdleGPU, Detail: b.String()}
	case len(fit) < j.GPUs:
		var in []int
		for i := range p.gpus {
			if p.view[i] != outside {
				in = append(in, i)
			}
		}
		slices.SortStableFunc(in, func(a, b int) int { return cmp.Compare(p.gpus[b].headroom(), p.gpus[a].headroom()) })
		b.WriteString("; most headroom:")
		p.list(&b, in[:min(j.GPUs, len(in))], func(g *gpuState) string { return fmt.Sprintf(" %d MiB", g.headroom()) })
		return Wait{Reason: ReasonNoMemory, Detail: b.String()}
	case len(healthyFit) < j.GPUs:
		b.WriteString("; room only on GPUs it skips:")
		fit = slices.DeleteFunc(fit, func(i int) bool { return p.view[i] == healthy })
		p.list(&b, fit, func(g *gpuState) string { return " " + p.why(g) })
		return Wait{Reason: ReasonUnhealthy, Detail: b.String()}
	}
	b.WriteString("; room held for starving jobs:")
	healthyFit = slices.DeleteFunc(healthyFit, func(i int) bool { return p.gpus[i].reservedBy == "" })
	p.list(&b, healthyFit, func(g *gpuState) string { return " for " + g.reservedBy })
	return Wait{Reason: ReasonReserved, Detail: b.String()}
}

// needs is "needs 20480+512 MiB on 2 GPUs" or "needs 1 whole idle GPU".
func (p *pass) needs(j *Job) string {
	if j.VRAMMiB == 0 {
		return "needs " + wholeN(j.GPUs)
	}
	return fmt.Sprintf("needs %d+%d MiB on %s", j.VRAMMiB, p.opt.MarginMiB, gpusN(j.GPUs))
}

// list writes " GPU 0<what>, GPU 3<what>".
func (p *pass) list(b *strings.Builder, gs []int, what func(*gpuState) string) {
	for k, i := range gs {
		if k > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(b, " GPU %d%s", p.gpus[i].index, what(&p.gpus[i]))
	}
}

// why names the health filter that skips g for the current job.
func (p *pass) why(g *gpuState) string {
	switch p.lim.check(g) {
	case skipBanned:
		return "banned"
	case skipMinFree:
		return fmt.Sprintf("free %d MiB < %d MiB", g.free, p.lim.minFree)
	case skipUtil:
		return fmt.Sprintf("utilization %d%% > %d%%", *g.util, p.lim.maxUtil)
	case skipPower:
		return fmt.Sprintf("power %g W > %g W", *g.power, p.lim.maxPower)
	default: // skipTemp
		return fmt.Sprintf("temperature %d C > %d C", *g.temp, p.lim.maxTemp)
	}
}
