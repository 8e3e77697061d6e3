package activate

import (
	"slices"
	"sort"

	"github.com/gpusched/gpusched/pkg/api"
)

// Proc is what an activation needs to know of a process.
type Proc struct {
	Name  string
	ID    string // the record's id: a reused name is another process
	UID   uint32
	State api.State
	GPUs  []string // UUIDs
	Job   bool     // an attempt of a queued job
	MPS   bool     // an MPS client, which cannot be frozen
}

// candidate is a process that might make room: last is when it was last
// active (0: never), held whether a hold keeps it.
type candidate struct {
	Proc
	last uint64
	held bool
}

// victims lists, in order, the processes that may be frozen to make room
// for target. With evict nil: the target owner's running processes that
// share a GPU with it (any, when it has none) and are neither job attempts
// nor MPS clients, least recently active first, then by name. Else evict's
// running processes of that owner, in its order. Never the target, and
// never a held process.
func victims(target Proc, procs []candidate, evict []string) []string {
	byName := map[string]candidate{}
	for _, c := range procs {
		if c.Name != target.Name && c.UID == target.UID && c.State == api.StateRunning && !c.held && !c.MPS {
			byName[c.Name] = c
		}
	}
	var out []string
	if evict != nil {
		for _, name := range evict {
			if _, ok := byName[name]; ok && !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
		return out
	}
	var picked []candidate
	for _, c := range byName {
		if !c.Job && sharesGPU(target.GPUs, c.GPUs) {
			picked = append(picked, c)
		}
	}
	sort.Slice(picked, func(i, j int) bool {
		if picked[i].last != picked[j].last {
			return picked[i].last < picked[j].last
		}
		return picked[i].Name < picked[j].Name
	})
	for _, c := range picked {
		out = append(out, c.Name)
	}
	return out
}

// sharesGPU reports whether a process on gpus may make room for one on
// target: any, when the target is on none.
func sharesGPU(target, gpus []string) bool {
	if len(target) == 0 {
		return true
	}
	for _, g := range gpus {
		if slices.Contains(target, g) {
			return true
		}
	}
	return false
}
