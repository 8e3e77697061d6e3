package cli

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newPSCmd builds `ps`.
func newPSCmd(a *app) *cobra.Command {
	var (
		user   string
		states []string
	)
	cmd := &cobra.Command{
		Use:     "ps",
		Aliases: []string{"list"},
		Short:   "List managed processes",
		Long: `List the managed processes you may see, sorted by name. TIER is where a live
process's GPU memory is: gpu, host (frozen into host RAM) or disk (hibernated
into a snapshot). AGE/EXIT is the time since start for a live process and how
it ended for an exited one. --state shows only processes in those states
(comma-separated, or the flag repeated): ps --state exited,frozen.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := api.PSParams{User: user}
			for _, s := range states {
				if !slices.Contains(api.States, api.State(s)) {
					return usagef("bad --state %q: want one of %s", s, joinStates(api.States))
				}
				p.States = append(p.States, api.State(s))
			}
			var res api.PSResult
			return a.call(cmd.Context(), api.MethodPS, p, &res, func() error {
				return writePS(a.stdout, res.Processes)
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "only processes of `USER`")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only processes in these `STATES` ("+joinStates(api.States)+")")
	return cmd
}

// writePS prints the process table in the order given.
func writePS(w io.Writer, procs []api.Process) error {
	t := newTable(w)
	fmt.Fprintf(t, "NAME\tSTATE\tTIER\tPID\tUSER\tGPUS\tVRAM\tAGE/EXIT\tCMD\n")
	for i := range procs {
		p := &procs[i]
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
			p.Name, p.State, tierText(p), p.PID, p.User, gpuIndexes(p.GPUs), mib(p.VRAMMiB), ageOrExit(p), cmdline(p.Cmd))
	}
	return t.Flush()
}

// tierText is a process's tier, "-" when it has none (exited).
func tierText(p *api.Process) string {
	if p.Tier == "" {
		return "-"
	}
	return string(p.Tier)
}

// ageOrExit is how long a live process has run, or how an exited one ended.
func ageOrExit(p *api.Process) string {
	if p.State == api.StateExited {
		return exitText(p.Exit)
	}
	start := p.StartedAt
	if start.IsZero() {
		start = p.CreatedAt
	}
	return age(time.Since(start))
}
