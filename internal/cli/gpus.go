package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newGPUsCmd builds `gpus`.
func newGPUsCmd(a *app) *cobra.Command {
	var procs bool
	cmd := &cobra.Command{
		Use:   "gpus",
		Short: "List the GPUs with their memory, load, health, leases and frozen memory",
		Long: `List the GPUs as the daemon last sampled them, by index.

MEMORY is used/total; POWER is draw/limit; "-" is a value the GPU does not
report. HEALTH is "unhealthy" when the GPU breaks one of the daemon's health
thresholds (--ban-gpu, --min-free, --max-util, --max-power, --max-temp), and
the reasons follow the table: no job or lease is placed on such a GPU.
LEASES are the ids of your leases holding the GPU (everyone's for root),
FROZEN the GPU memory of processes frozen off it, parked in host RAM, and
PROCS the number of processes holding memory on it, managed or not; --procs
lists them after the table (--json too): each one's pid, its managed process
("-" for one the daemon did not start), its memory, and its own utilization
where the GPU tells processes apart.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.GPUsResult
			return a.call(cmd.Context(), api.MethodGPUs, nil, &res, func() error {
				if err := writeGPUs(a.stdout, res.GPUs); err != nil || !procs {
					return err
				}
				return writeGPUProcesses(a.stdout, res.GPUs)
			})
		},
	}
	cmd.Flags().BoolVar(&procs, "procs", false, "list the processes holding memory on each GPU")
	return cmd
}

// writeGPUProcesses lists the processes holding memory on each GPU, by
// GPU, as the daemon last sampled them, after a blank line.
func writeGPUProcesses(w io.Writer, gpus []api.GPU) error {
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	t := newTable(w)
	fmt.Fprintf(t, "GPU\tPID\tMANAGED\tMEMORY\tUTIL\n")
	for _, g := range gpus {
		for _, p := range g.Processes {
			util := "-"
			if p.UtilPercent != nil {
				util = strconv.Itoa(*p.UtilPercent) + "%"
			}
			fmt.Fprintf(t, "%d\t%d\t%s\t%s\t%s\n", g.Index, p.PID, orDash(p.Managed), mib(p.UsedMiB), util)
		}
	}
	return t.Flush()
}

// writeGPUs prints the GPU table in the order given, then why the unhealthy
// GPUs are unhealthy, then the driver versions and their known problem.
func writeGPUs(w io.Writer, gpus []api.GPU) error {
	t := newTable(w)
	fmt.Fprintf(t, "INDEX\tNAME\tMEMORY\tUTIL\tPOWER\tTEMP\tHEALTH\tLEASES\tFROZEN\tFILLER\tPROCS\n")
	var reasons []string
	for _, g := range gpus {
		util, temp, health, leases, frozen, filler := "-", "-", "ok", "-", "-", "-"
		if g.UtilPercent != nil {
			util = strconv.Itoa(*g.UtilPercent) + "%"
		}
		if g.TempC != nil {
			temp = strconv.Itoa(*g.TempC) + "C"
		}
		if !g.Healthy {
			health = "unhealthy"
			reasons = append(reasons, g.Unhealthy...)
		}
		if len(g.Leases) > 0 {
			leases = strings.Join(g.Leases, ",")
		}
		if g.FrozenMiB > 0 {
			frozen = mib(g.FrozenMiB)
		}
		if f := g.Filler; f != nil {
			filler = fmt.Sprintf("%s/%s (%s)", mib(f.HeldMiB), mib(f.TargetMiB), f.User)
		}
		fmt.Fprintf(t, "%d\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n",
			g.Index, g.Name, mib(g.UsedMiB), mib(g.TotalMiB), util, powerText(g.PowerWatts, g.PowerLimitWatts),
			temp, health, leases, frozen, filler, len(g.Processes))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, r := range reasons {
		if _, err := fmt.Fprintln(w, r); err != nil {
			return err
		}
	}
	if len(gpus) > 0 && (gpus[0].Driver != "" || gpus[0].Checkpoint != "") {
		if _, err := fmt.Fprintf(w, "driver %s, checkpoint driver %s\n", orDash(gpus[0].Driver), orDash(gpus[0].Checkpoint)); err != nil {
			return err
		}
	}
	if len(gpus) > 0 && gpus[0].DriverWarning != "" {
		_, err := fmt.Fprintf(w, "warning: %s\n", gpus[0].DriverWarning)
		return err
	}
	return nil
}

// powerText shows draw/limit as "252W/700W", "252W" without a limit, "-"
// when neither is known.
func powerText(draw, limit *float64) string {
	d := "-"
	if draw != nil {
		d = fmt.Sprintf("%.0fW", *draw)
	}
	if limit == nil {
		return d
	}
	return fmt.Sprintf("%s/%.0fW", d, *limit)
}
