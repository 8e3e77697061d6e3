package cli

import (
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// mpsFlags are the NVIDIA MPS attributes of run and submit.
type mpsFlags struct {
	threads  int
	memLimit string
}

// register adds --mps-threads and --mps-mem-limit; forJobs says which
// default the memory limit has.
func (m *mpsFlags) register(cmd *cobra.Command, forJobs bool) {
	limitDefault := "none"
	if forJobs {
		limitDefault = "the job's --vram"
	}
	f := cmd.Flags()
	f.IntVar(&m.threads, "mps-threads", 0, "run as an NVIDIA MPS client with this `PERCENT` of each GPU's threads, 1..100 (see docs/mps.md)")
	f.StringVar(&m.memLimit, "mps-mem-limit", "", "run as an NVIDIA MPS client with this memory limit per GPU, a `SIZE` such as 8G (default: "+limitDefault+")")
}

// apply checks the flags and sets them in a request.
func (m *mpsFlags) apply(threads *int, limit *api.VRAM) error {
	if m.threads < 0 || m.threads > 100 {
		return usagef("--mps-threads %d: want a percentage, 1..100", m.threads)
	}
	*threads = m.threads
	if m.memLimit == "" {
		return nil
	}
	n, err := api.ParseMiB(m.memLimit)
	if err != nil {
		return usagef("bad --mps-mem-limit %q: %w", m.memLimit, err)
	}
	if n == 0 {
		return usagef("--mps-mem-limit %q: must be more than 0", m.memLimit)
	}
	*limit = api.VRAM{MiB: n}
	return nil
}

// priorityClass is the GPUSCHED_PRIORITY a nice value gives a process.
func priorityClass(nice int) string {
	switch {
	case nice < 0:
		return "high"
	case nice > 0:
		return "low"
	}
	return "normal"
}

// mpsText describes MPS attributes: "50% of each GPU's threads, memory
// limit 4.0 GiB per GPU".
func mpsText(threads int, limitMiB uint64) string {
	s := "all threads"
	if threads > 0 {
		s = fmt.Sprintf("%d%% of each GPU's threads", threads)
	}
	if limitMiB > 0 {
		return s + ", memory limit " + mib(limitMiB) + " per GPU"
	}
	return s + ", no memory limit"
}
