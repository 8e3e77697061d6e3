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
	temp         *int
	banned       bool
	unattributed uint64 // sampled use no occupant accounts for (driver overhead)
	load         uint64 // charges + unattributed
	nonPerm      uint64 // charges of holders that may go away by themselves
	capacity     uint64 // Total - charges of permanent occupants: the most a job can ever get
	permanent    bool   // a permanent occupant holds memory: never idle
	holders      int    // occupants and starts with a non-zero charge
	stakes       []stake
	reservedBy   string          // the starving job that holds this GPU, if any
	fills        map[string]fill // owner -> what their fillers hold here; nil without fillers
}

// fill is what one owner's fillers hold on a GPU: memory that owner's jobs
// may take (the filler hands it over), and that charges everyone else.
type fill struct {
	mib     uint64
	holders int
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

// headroomFor is what is left for owner's jobs: the headroom plus what
// owner's fillers would hand over.
func (g *gpuState) headroomFor(owner string) uint64 {
	return sub(g.total, sub(g.load, g.fills[owner].mib))
}

// holdersFor counts the holders that stand in the way of owner's jobs:
// all but owner's fillers.
func (g *gpuState) holdersFor(owner string) int { return g.holders - g.fills[owner].holders }

// handOver takes up to mib from owner's fillers for one of owner's jobs.
func (g *gpuState) handOver(owner string, mib uint64) {
	f, ok := g.fills[owner]
	if !ok {
		return
	}
	take := min(mib, f.mib)
	f.mib -= take
	g.load -= take
	g.nonPerm -= min(take, g.nonPerm)
	if f.mib == 0 {
		g.holders -= f.holders
		f.holders = 0
	}
	g.fills[owner] = f
}

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
			util: d.UtilPercent, power: d.PowerWatts, temp: d.TempC, banned: banned[d.UUID]}
		var used, perm uint64
		for _, o := range d.Occupants {
			c := charge(o, d.TotalMiB, snap.Options)
			used += o.UsedMiB
			g.load += c
			if c == 0 {
				continue
			}
			g.holders++
			if o.Kind == Filler {
				if g.fills == nil {
					g.fills = map[string]fill{}
				}
				f := g.fills[o.Owner]
				f.mib += c
				f.holders++
				g.fills[o.Owner] = f
			}
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
