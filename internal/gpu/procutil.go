package gpu

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// processUtil reads each process's own utilization of a device
// (nvmlDeviceGetProcessUtilization), from where the last read of that
// device left off.
//
// NVML's reference: "One utilization sample structure is returned per
// process running, that had some non-zero utilization during the last
// sample period", with the CPU timestamp of the sample; only samples newer
// than lastSeenTimeStamp are returned (0: all the driver keeps), and "if
// no valid sample entries are found since the lastSeenTimeStamp,
// NVML_ERROR_NOT_FOUND is returned" (an idle GPU answers so:
// Cldfire/nvml-wrapper#56). A process may have more than one sample in
// the window (NVIDIA/go-nvml#51 shows samples seconds old), and a value
// far past 100 has been seen (2147483632, NVIDIA/DCGM#83): it is taken
// as busy, never as idle.
type processUtil struct {
	mu   sync.Mutex
	seen map[string]uint64 // device uuid -> newest sample timestamp read
}

// fill sets the utilization of procs, device uuid's processes: those
// without a sample since the last read were idle (0). Where the device
// cannot tell (not supported, or any other failure) they stay nil.
func (p *processUtil) fill(h nvml.Device, uuid string, procs []ProcUsage) {
	if h == nil || len(procs) == 0 {
		return
	}
	p.mu.Lock()
	last := p.seen[uuid]
	p.mu.Unlock()
	samples, ret := h.GetProcessUtilization(last)
	switch ret {
	case nvml.SUCCESS, nvml.ERROR_NOT_FOUND: // NOT_FOUND: no process was busy
	default:
		return
	}
	busy := map[int]int{}
	newest := last
	for _, s := range samples {
		u := int(min(max(s.SmUtil, s.MemUtil, s.EncUtil, s.DecUtil), 100))
		busy[int(s.Pid)] = max(busy[int(s.Pid)], u)
		newest = max(newest, s.TimeStamp)
	}
	p.mu.Lock()
	p.seen[uuid] = max(p.seen[uuid], newest)
	p.mu.Unlock()
	for i := range procs {
		u := busy[procs[i].PID]
		procs[i].UtilPercent = &u
	}
}
