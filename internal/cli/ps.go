package cli

import (
	"context"
	"encoding/json"
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
		user    string
		states  []string
		all     bool
		noTrunc bool
	)
	cmd := &cobra.Command{
		Use:     "ps",
		Aliases: []string{"list"},
		Short:   "List managed processes",
		Long: `List the live managed processes you may see (every state but exited),
sorted by name; -a lists the exited ones too, and --state only those in the
states given (comma-separated, or the flag repeated): ps --state exited,frozen.
TIER is where a live process's GPU memory is: gpu, host (frozen into host RAM)
or disk (hibernated into a snapshot). VRAM is the GPU memory it holds; in
parentheses, what a frozen or hibernated one will need back on its GPUs.
AGE/EXIT is the time since start for a live process and how it ended for an
exited one. A command longer than the daemon lists (4 KiB) ends in "…";
--no-trunc asks for each such one whole. gpuschedctl rm forgets exited
processes.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := api.PSParams{User: user}
			switch {
			case all && len(states) > 0:
				return usagef("give --all or --state, not both")
			case !all && len(states) == 0:
				p.States = liveStates()
			}
			for _, s := range states {
				if !slices.Contains(api.States, api.State(s)) {
					return usagef("bad --state %q: want one of %s", s, joinStates(api.States))
				}
				p.States = append(p.States, api.State(s))
			}
			if noTrunc {
				return a.psWhole(cmd.Context(), p)
			}
			var res api.PSResult
			return a.call(cmd.Context(), api.MethodPS, p, &res, func() error {
				return writePS(a.stdout, res.Processes)
			})
		},
	}
	cmd.Flags().BoolVar(&noTrunc, "no-trunc", false, "show whole commands, each cut one asked for by name")
	cmd.Flags().StringVar(&user, "user", "", "only processes of `USER`")
	cmd.Flags().BoolVarP(&all, "all", "a", false, "list exited processes too")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only processes in these `STATES` ("+joinStates(api.States)+")")
	return cmd
}

// psWhole is ps with every command whole: the listing cuts long ones
// (cmd_truncated), which status of each name returns whole. A process
// removed or replaced meanwhile keeps its cut command.
func (a *app) psWhole(ctx context.Context, p api.PSParams) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var res api.PSResult
	if err := c.Call(ctx, api.MethodPS, p, &res); err != nil {
		return err
	}
	for i := range res.Processes {
		pr := &res.Processes[i]
		if !pr.CmdTruncated {
			continue
		}
		whole, err := c.Process(ctx, pr.Name)
		switch {
		case err == nil && whole.ID == pr.ID:
			pr.Cmd, pr.CmdTruncated = whole.Cmd, false
		case err != nil && !api.IsNotFound(err):
			return err
		}
	}
	if a.json {
		raw, err := json.Marshal(res)
		if err != nil {
			return err
		}
		return writeJSON(a.stdout, raw)
	}
	return writePS(a.stdout, res.Processes)
}

// writePS prints the process table in the order given.
func writePS(w io.Writer, procs []api.Process) error {
	t := newTable(w)
	fmt.Fprintf(t, "NAME\tSTATE\tTIER\tPID\tUSER\tGPUS\tVRAM\tAGE/EXIT\tCMD\n")
	for i := range procs {
		p := &procs[i]
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n",
			p.Name, p.State, tierText(p), p.PID, p.User, gpuIndexes(p.GPUs), procVRAM(p), ageOrExit(p), listedCmd(p.Cmd, p.CmdTruncated))
	}
	return t.Flush()
}

// liveStates are every state but exited.
func liveStates() []api.State {
	var live []api.State
	for _, s := range api.States {
		if s != api.StateExited {
			live = append(live, s)
		}
	}
	return live
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
