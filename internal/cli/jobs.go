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

// jobStates are the states jobs --state accepts, in lifecycle order.
var jobStates = []api.JobState{api.JobQueued, api.JobStarting, api.JobRunning, api.JobPreempted,
	api.JobDone, api.JobFailed, api.JobTimedOut, api.JobCancelled, api.JobInfeasible}

// newJobsCmd builds `jobs`.
func newJobsCmd(a *app) *cobra.Command {
	var (
		all    bool
		user   string
		states []string
		recent time.Duration
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List queued and running jobs",
		Long: `List the jobs you may see in submission order: the unfinished ones and those
that finished within --recent (10m; 0 for none), or with --all every finished
one too. --state shows only jobs in those states
(comma-separated, or the flag repeated), finished ones included; "finished"
stands for every final state (done, failed, timed_out, cancelled,
infeasible). Finished jobs stay listed until jobs prune removes them, or the
daemon does past --keep-finished per user or --keep-finished-for.

VRAM is a job's current declaration per GPU: as submitted, an auto one once
resolved, or raised after an out-of-memory retry; "whole" is an undeclared
job, which takes whole idle GPUs and "auto" one not yet resolved. ATTEMPTS
counts its runs, AGE is the time since it was submitted and REASON says why
it waits or why it ended as it did.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if recent < 0 {
				return usagef("bad --recent %s: must not be negative", recent)
			}
			p := api.JobsParams{All: all, User: user}
			if !all && len(states) == 0 {
				p.Recent = api.Duration(recent)
			}
			for _, s := range states {
				st := api.JobState(s)
				if st != api.JobsFinished && !slices.Contains(jobStates, st) {
					return usagef("bad --state %q: want one of %s, or %s", s, joinStates(jobStates), api.JobsFinished)
				}
				p.States = append(p.States, st)
			}
			if len(p.States) == 1 && p.States[0] != api.JobsFinished {
				// One state goes as state, which every daemon knows.
				p.State, p.States, p.All = p.States[0], nil, p.All || p.States[0].Terminal()
			}
			var res api.JobsResult
			return a.call(cmd.Context(), api.MethodJobs, p, &res, func() error {
				return writeJobs(a.stdout, res.Jobs)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include finished jobs")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only jobs in these `STATES` ("+joinStates(jobStates)+", finished)")
	cmd.Flags().StringVar(&user, "user", "", "only jobs of `USER`")
	cmd.Flags().DurationVar(&recent, "recent", 10*time.Minute, "also list the jobs that finished within `D` (not with --all or --state)")
	cmd.AddCommand(newJobsPruneCmd(a))
	return cmd
}

// joinStates lists states as "queued, starting, ...".
func joinStates[S ~string](states []S) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

// writeJobs prints the job table in the order given.
func writeJobs(w io.Writer, jobs []api.Job) error {
	t := newTable(w)
	fmt.Fprintf(t, "NAME\tID\tSTATE\tPRIO\tVRAM\tGPUS\tATTEMPTS\tAGE\tREASON\n")
	for i := range jobs {
		j := &jobs[i]
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\n", j.Name, j.ID, j.State, j.Priority, jobVRAM(j),
			j.GPUs, len(j.Attempts), age(time.Since(j.SubmittedAt)), orDash(j.Reason))
	}
	return t.Flush()
}

// jobVRAM is a job's current declaration per GPU: "18.0 GiB", "auto" while
// unresolved, or "whole" when undeclared.
func jobVRAM(j *api.Job) string {
	switch {
	case j.VRAMMiB > 0:
		return mib(j.VRAMMiB)
	case j.VRAM.Auto:
		return "auto"
	}
	return "whole"
}

// orDash is s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
