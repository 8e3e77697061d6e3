package cli

import "github.com/gpusched/gpusched/pkg/api"

// procVRAM is the GPU memory a process holds, or for one frozen or
// hibernated off its GPUs the memory it will need back, in parentheses:
// "12.5 GiB", "(11.7 GiB)".
func procVRAM(p *api.Process) string {
	need := uint64(0)
	switch p.Tier {
	case api.TierHost:
		need = p.HostMiB
	case api.TierDisk:
		need = p.DiskMiB
	}
	if p.VRAMMiB == 0 && need > 0 {
		return "(" + mib(need) + ")"
	}
	return mib(p.VRAMMiB)
}
