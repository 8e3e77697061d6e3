package daemon

import (
	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/placement"
)

// neverFits says why j can never start on this machine, whatever else runs
// or goes away (too few usable GPUs, or none large enough for its
// declaration plus the margin), or "" when it may. It asks placement about
// j alone on the machine's GPUs emptied: the rule that ends a queued job as
// infeasible, applied before it is queued. With no GPU known yet (no
// sample has succeeded), it refuses nothing.
func (d *Daemon) neverFits(j *jobqueue.Job) string {
	gv := d.gpuView()
	if len(gv.devices) == 0 {
		return ""
	}
	gpus := make([]placement.GPU, len(gv.devices))
	for i, dv := range gv.devices {
		gpus[i] = placement.GPU{Index: dv.Index, UUID: dv.UUID, TotalMiB: dv.TotalMiB}
	}
	snap := placement.Snapshot{GPUs: gpus, Options: d.placementOptions(gv)}
	plan := placement.Place(snap, []placement.Job{{ID: "submit", GPUs: j.GPUs, VRAMMiB: j.VRAMMiB}})
	if len(plan.Infeasible) == 0 {
		return ""
	}
	return plan.Infeasible[0].Detail
}
