package placement

import (
	"cmp"
	"slices"
)

// gpuState is one GPU as the pass sees it, with the charges of this pass's
// starts and preemptions applied.
type gpuState struct {
	index        int
	uuid         string
	total        uint64
	free         uint64 // sampled Total - Used, for the MinFree filter
	util         *int
	power        *float64
	banned       bool
	unattributed uint64 // sampled use no occupant accounts for (driver overhead)
	load         uint64 // charges + unattributed
	nonPerm      uint64 // charges of holders that may go away by themselves
	capacity     uint64 // Total - charges of permanent occupants: the most a job can ever get
	permanent    bool   // a permanent occupant holds memory: never idle
	holders      int    // occupants and starts with a non-zero charge
	stakes       []stake
	reservedBy   string // the starving job that holds this GPU, if any
}

// stake is a preemptible managed process's charge on one GPU.
type stake struct {
	p         *proc
	charge    uint64
	permanent bool
}

// proc is a preemptible managed process, possibly on several GPUs.
type proc struct {
	id       string
	priority int
	owner    string
	total    uint64 // its charges over all its GPUs: what freezing it frees
	gpus     []int  // positions in pass.gpus
	gone     bool   // preempted earlier in this pass
}

// headroom is what is left for new jobs on g now.
func (g *gpuState) headroom() uint64 { return sub(g.total, g.load) }

// newGPUs charges every occupant of the snapshot's GPUs, sorted by Index.
func newGPUs(snap Snapshot) []gpuState {
	banned := make(map[string]bool, len(snap.Options.Banned))
	for _, u := range snap.Options.Banned {
		banned[u] = true
	}
	src := slices.Clone(snap.GPUs)
	slices.SortFunc(src, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.UUID, b.UUID))
	})
	gpus := make([]gpuState, len(src))
	procs := map[string]*proc{}
	for i, d := range src {
		g := &gpus[i]
		*g = gpuState{index: d.Index, uuid: d.UUID, total: d.TotalMiB, free: sub(d.TotalMiB, d.UsedMiB),
			util: d.UtilPercent, power: d.PowerWatts, banned: banned[d.UUID]}
		var used, perm uint64
		for _, o := range d.Occupants {
			c := charge(o, d.TotalMiB, snap.Options)
			used += o.UsedMiB
			g.load += c
			if c == 0 {
				continue
			}
			g.holders++
			if o.Permanent {
				perm += c
				g.permanent = true
			} else {
				g.nonPerm += c
			}
			if o.Kind != Managed || !o.Preemptible {
				continue
			}
			p := procs[o.ID]
			if p == nil {
				p = &proc{id: o.ID, priority: o.Priority, owner: o.Owner}
				procs[o.ID] = p
			}
			p.total += c
			if len(p.gpus) == 0 || p.gpus[len(p.gpus)-1] != i {
				p.gpus = append(p.gpus, i)
			}
			g.stakes = append(g.stakes, stake{p: p, charge: c, permanent: o.Permanent})
		}
		slices.SortFunc(g.stakes, func(a, b stake) int { return cmp.Compare(a.p.id, b.p.id) })
		g.unattributed = sub(d.UsedMiB, used)
		g.load += g.unattributed
		g.capacity = sub(d.TotalMiB, perm)
	}
	return gpus
}
