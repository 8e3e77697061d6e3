package cli

import (
	"fmt"
	"io"
	"strconv"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newGPUsCmd builds `gpus`.
func newGPUsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "gpus",
		Short: "List the GPUs with their memory, load and processes",
		Long: `List the GPUs as the daemon last sampled them. PROCS counts the processes
holding memory on each GPU, managed or not; --json lists them.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.GPUsResult
			return a.call(cmd.Context(), api.MethodGPUs, nil, &res, func() error {
				return writeGPUs(a.stdout, res.GPUs)
			})
		},
	}
}

// writeGPUs prints the GPU table in the order given.
func writeGPUs(w io.Writer, gpus []api.GPU) error {
	t := newTable(w)
	fmt.Fprintf(t, "INDEX\tUUID\tNAME\tUSED/TOTAL\tFREE\tUTIL\tPOWER\tPROCS\n")
	for _, g := range gpus {
		util, power := "-", "-"
		if g.UtilPercent != nil {
			util = strconv.Itoa(*g.UtilPercent) + "%"
		}
		if g.PowerWatts != nil {
			power = fmt.Sprintf("%.0fW", *g.PowerWatts)
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s/%s\t%s\t%s\t%s\t%d\n",
			g.Index, g.UUID, g.Name, mib(g.UsedMiB), mib(g.TotalMiB), mib(g.FreeMiB), util, power, len(g.Processes))
	}
	return t.Flush()
}
