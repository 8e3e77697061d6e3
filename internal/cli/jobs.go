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
		all         bool
		state, user string
	)
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "List queued and running jobs",
		Long: `List the jobs you may see in submission order: the unfinished ones, or with
--all the finished ones too. --state shows only jobs in that state; a final
state (done, failed, timed_out, cancelled, infeasible) implies --all.

VRAM is a job's current declaration per GPU: as submitted, an auto one once
resolved, or raised after an out-of-memory retry; "whole" is an undeclared
job, which takes whole idle GPUs and "auto" one not yet resolved. ATTEMPTS
counts its runs, AGE is the time since it was submitted and REASON says why
it waits or why it ended as it did.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := api.JobsParams{State: api.JobState(state), All: all, User: user}
			if state != "" {
				if !slices.Contains(jobStates, p.State) {
					return usagef("bad --state %q: want one of %s", state, joinStates(jobStates))
				}
				p.All = p.All || p.State.Terminal()
			}
			var res api.JobsResult
			return a.call(cmd.Context(), api.MethodJobs, p, &res, func() error {
				return writeJobs(a.stdout, res.Jobs)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include finished jobs")
	cmd.Flags().StringVar(&state, "state", "", "only jobs in `STATE` ("+joinStates(jobStates)+")")
	cmd.Flags().StringVar(&user, "user", "", "only jobs of `USER`")
	return cmd
}

// joinStates lists states as "queued, starting, ...".
func joinStates(states []api.JobState) string {
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
