package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newStatusCmd builds `status`.
func newStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show the daemon overview, or one process in detail",
		Args:  optionalName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				var st api.Status
				return a.call(cmd.Context(), api.MethodStatus, nil, &st, func() error {
					return writeOverview(a.stdout, &st)
				})
			}
			var p api.Process
			return a.call(cmd.Context(), api.MethodStatus, api.StatusParams{Name: args[0]}, &p, func() error {
				return writeProcess(a.stdout, &p)
			})
		},
	}
}

// writeOverview prints the daemon, the process counts and the GPU memory.
func writeOverview(w io.Writer, st *api.Status) error {
	t := newTable(w)
	fmt.Fprintf(t, "version:\t%s (protocol %d)\n", st.Version, st.Protocol)
	fmt.Fprintf(t, "backend:\t%s\n", st.Backend)
	fmt.Fprintf(t, "uptime:\t%s\n", age(time.Duration(st.UptimeSeconds*float64(time.Second))))
	fmt.Fprintf(t, "processes:\t%s\n", stateCounts(st))
	fmt.Fprintf(t, "jobs:\t%s\n", jobCounts(st))
	for i := range st.Fillers {
		key := ""
		if i == 0 {
			key = "fillers:"
		}
		fmt.Fprintf(t, "%s\t%s\n", key, fillerLine(&st.Fillers[i]))
	}
	fmt.Fprintf(t, "checkpoint:\t%s driver\n", st.Driver)
	budget := "unlimited"
	if st.RAMBudgetMiB > 0 {
		budget = mib(st.RAMBudgetMiB)
	}
	yours := ""
	if st.RAMShareMiB > 0 {
		yours = fmt.Sprintf("; yours %s of %s", mib(st.CallerHostMiB), mib(st.RAMShareMiB))
	}
	fmt.Fprintf(t, "host ram:\t%s frozen (budget %s)%s\n", mib(st.HostMiB), budget, yours)
	fmt.Fprintf(t, "disk tier:\t%s\n", diskTier(st))
	if len(st.GPUs) == 0 {
		fmt.Fprintf(t, "gpus:\tnone\n")
		return t.Flush()
	}
	if err := t.Flush(); err != nil {
		return err
	}
	g := newTable(w)
	fmt.Fprintf(g, "\nGPU\tUUID\tUSED\tTOTAL\tFREE\n")
	for _, s := range st.GPUs {
		fmt.Fprintf(g, "%d\t%s\t%s\t%s\t%s\n", s.Index, s.UUID, mib(s.UsedMiB), mib(s.TotalMiB), mib(s.FreeMiB))
	}
	return g.Flush()
}

// fillerLine shows a filler at a glance: "GPU 1 alice, held 70.0 GiB of
// 76.0 GiB (0.95)", then what it is attached to or that it is a session's.
func fillerLine(f *api.Filler) string {
	s := fmt.Sprintf("GPU %d %s, held %s of %s", f.Index, f.User, mib(f.HeldMiB), fillerTarget(f))
	switch {
	case f.Process != "":
		s += ", attached to " + f.Process
	case f.Session:
		s += ", session"
	}
	if f.Error != "" {
		s += " (error: " + f.Error + ")"
	}
	return s
}

// jobCounts shows the queue: "3 running, 12 queued, 40 done; 1 lease".
func jobCounts(st *api.Status) string {
	var parts []string
	for _, s := range []api.JobState{api.JobStarting, api.JobRunning, api.JobPreempted, api.JobQueued, api.JobDone,
		api.JobFailed, api.JobTimedOut, api.JobCancelled, api.JobInfeasible} {
		if n := st.Jobs[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, s))
		}
	}
	out := "none"
	if len(parts) > 0 {
		out = strings.Join(parts, ", ")
	}
	if st.Leases == 0 {
		return out
	}
	return out + "; " + api.Plural(st.Leases, "lease", "leases")
}

// diskTier shows the disk tier: "criu 4.1.1, snapshots 1.2 GiB (budget
// unlimited), 40.0 GiB free on its disk, 10.0 GiB of it kept free", or
// "off" when the daemon has no CRIU.
func diskTier(st *api.Status) string {
	snaps := fmt.Sprintf("snapshots %s (budget %s)", bytesize(st.DiskBytes), diskBudget(st.DiskBudget))
	if st.CRIU == "" {
		if st.DiskBytes == 0 {
			return "off (no CRIU)"
		}
		return "off (no CRIU), " + snaps
	}
	free := fmt.Sprintf(", %s free on its disk", bytesize(st.DiskFree))
	if st.DiskKeepFree > 0 {
		free += fmt.Sprintf(", %s of it kept free", bytesize(st.DiskKeepFree))
	}
	if st.DiskShare > 0 {
		free += fmt.Sprintf("; yours %s of %s", bytesize(st.CallerDiskBytes), bytesize(st.DiskShare))
	}
	return "criu " + st.CRIU + ", " + snaps + free
}

// stateCounts shows "3 (running 2, exited 1)", lifecycle states first.
func stateCounts(st *api.Status) string {
	order := []api.State{api.StateStarting, api.StateRunning, api.StateFreezing, api.StateFrozen,
		api.StateThawing, api.StateLocked, api.StateFailed, api.StateHibernating, api.StateHibernated,
		api.StateRestoring, api.StateExited}
	var others []api.State
	for s := range st.States {
		if !slices.Contains(order, s) {
			others = append(others, s)
		}
	}
	slices.Sort(others)
	var parts []string
	for _, s := range append(order, others...) {
		if n := st.States[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprint(st.Processes)
	}
	return fmt.Sprintf("%d (%s)", st.Processes, strings.Join(parts, ", "))
}

// writeProcess prints one process as "key: value" lines.
func writeProcess(w io.Writer, p *api.Process) error {
	t := newTable(w)
	state := string(p.State)
	if p.State == api.StateExited {
		state += " (" + exitText(p.Exit) + ")"
	}
	fmt.Fprintf(t, "name:\t%s\n", p.Name)
	fmt.Fprintf(t, "id:\t%s\n", p.ID)
	fmt.Fprintf(t, "state:\t%s\n", state)
	if p.Exit != nil && p.Exit.Reason != "" {
		fmt.Fprintf(t, "reason:\t%s\n", p.Exit.Reason)
	}
	if p.Error != "" {
		fmt.Fprintf(t, "error:\t%s\n", p.Error)
	}
	if p.Tier != "" {
		fmt.Fprintf(t, "tier:\t%s\n", p.Tier)
	}
	if p.Tier == api.TierHost {
		fmt.Fprintf(t, "host ram:\t%s (frozen %s)\n", mib(p.HostMiB), since(p.FrozenAt))
	}
	switch {
	case p.Snapshot == "":
	case p.Tier == api.TierDisk:
		fmt.Fprintf(t, "snapshot:\t%s\n", p.Snapshot)
		fmt.Fprintf(t, "frozen:\t%s\n", since(p.FrozenAt))
	case p.State != api.StateExited:
		fmt.Fprintf(t, "snapshot:\t%s (parent of its next hibernate)\n", p.Snapshot)
	}
	if p.State != api.StateExited {
		fmt.Fprintf(t, "policy:\t%s\n", policyText(p.Policy))
	}
	fmt.Fprintf(t, "pid:\t%d\n", p.PID)
	fmt.Fprintf(t, "init pid:\t%d\n", p.InitPID)
	fmt.Fprintf(t, "user:\t%s\n", who(p.User, p.UID, p.GID))
	fmt.Fprintf(t, "cmd:\t%s\n", cmdline(p.Cmd))
	fmt.Fprintf(t, "dir:\t%s\n", p.Dir)
	fmt.Fprintf(t, "nice:\t%d\n", p.Nice)
	if p.CPUs != "" {
		fmt.Fprintf(t, "cpus:\t%s (its caller's)\n", p.CPUs)
	}
	if p.MPSThreads > 0 || p.MPSMemLimit > 0 {
		fmt.Fprintf(t, "mps:\t%s\n", mpsText(p.MPSThreads, p.MPSMemLimit))
	}
	if len(p.GPUs) == 0 {
		fmt.Fprintf(t, "gpus:\t-\n")
	}
	for i, g := range p.GPUs {
		key := ""
		if i == 0 {
			key = "gpus:"
		}
		util := ""
		if g.UtilPercent != nil {
			util = fmt.Sprintf(", util %d%%", *g.UtilPercent)
		}
		fmt.Fprintf(t, "%s\t%d %s %s%s\n", key, g.Index, g.UUID, mib(g.UsedMiB), util)
	}
	fmt.Fprintf(t, "vram:\t%s\n", mib(p.VRAMMiB))
	fmt.Fprintf(t, "log:\t%s\n", p.Log)
	fmt.Fprintf(t, "created:\t%s\n", since(p.CreatedAt))
	fmt.Fprintf(t, "started:\t%s\n", since(p.StartedAt))
	if !p.ExitedAt.IsZero() {
		fmt.Fprintf(t, "exited:\t%s\n", since(p.ExitedAt))
	}
	return t.Flush()
}
