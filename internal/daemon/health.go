package daemon

import (
	"fmt"
	"slices"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/gpu"
	"github.com/gpusched/gpusched/pkg/api"
)

// gpuHealth evaluates one sampled GPU against the configured health
// thresholds (--ban-gpu, --min-free, --max-util, --max-power, --max-temp)
// and returns why it is unhealthy, one sentence per threshold it breaks, in
// that order; nil when it is healthy. A metric the GPU does not report
// passes, as it does in placement, whose filters apply the same thresholds
// (and a lease's own) to every job.
func gpuHealth(cfg *config.Config, dv gpu.Device) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("GPU %d: ", dv.Index)+fmt.Sprintf(format, args...))
	}
	if bannedGPU(cfg, dv) {
		add("banned by --ban-gpu")
	}
	if dv.MIG {
		out = append(out, migNote(dv))
	}
	if f := free(dv.TotalMiB, dv.UsedMiB); f < cfg.MinFreeMiB {
		add("free memory %d MiB is below --min-free %d MiB", f, cfg.MinFreeMiB)
	}
	if cfg.MaxUtilPercent > 0 && dv.UtilPercent != nil && *dv.UtilPercent > cfg.MaxUtilPercent {
		add("utilization %d%% is above --max-util %d", *dv.UtilPercent, cfg.MaxUtilPercent)
	}
	if cfg.MaxPowerWatts > 0 && dv.PowerWatts != nil && *dv.PowerWatts > cfg.MaxPowerWatts {
		add("power draw %g W is above --max-power %g", *dv.PowerWatts, cfg.MaxPowerWatts)
	}
	if cfg.MaxTempC > 0 && dv.TempC != nil && *dv.TempC > cfg.MaxTempC {
		add("temperature %d C is above --max-temp %d", *dv.TempC, cfg.MaxTempC)
	}
	return out
}

// bannedGPU reports whether --ban-gpu names dv, by UUID or index.
func bannedGPU(cfg *config.Config, dv gpu.Device) bool {
	for _, s := range cfg.BannedGPUs {
		ref, err := api.ParseGPURef(s) // validated when the flag was parsed
		if err != nil {
			continue
		}
		if ref.UUID == dv.UUID || ref.UUID == "" && ref.Index == dv.Index {
			return true
		}
	}
	return false
}

// usableGPUs resolves the GPUs a call (what, for messages) aims at, as
// resolveGPUs does, and refuses a lost one (missing from the driver's list,
// or failing its queries) or one in MIG mode with unavailable; with none
// named it is every GPU that is neither.
func (d *Daemon) usableGPUs(what string, gpu *api.GPURef, refs []api.GPURef) ([]string, error) {
	uuids, err := d.resolveGPUs(what, gpu, refs)
	if err != nil {
		return nil, err
	}
	gv := d.gpuView()
	if gpu == nil && len(refs) == 0 {
		return slices.DeleteFunc(uuids, func(u string) bool { return gv.lost[u] != "" || gv.inMIG(u) }), nil
	}
	if err := gv.lostError(what, uuids); err != nil {
		return nil, err
	}
	if err := gv.migError(what, uuids); err != nil {
		return nil, err
	}
	return uuids, nil
}
