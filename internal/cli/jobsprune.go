package cli

import (
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newJobsPruneCmd builds `jobs prune`.
func newJobsPruneCmd(a *app) *cobra.Command {
	var user string
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Remove your finished jobs",
		Long: `Remove your finished jobs (done, failed, timed_out, cancelled, infeasible)
from the queue's history; root removes every user's, or --user's. Unfinished
jobs are left as they are. Prints each job removed.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.JobsResult
			return a.call(cmd.Context(), api.MethodPruneJobs, api.PruneJobsParams{User: user}, &res, func() error {
				for _, j := range res.Jobs {
					if _, err := fmt.Fprintf(a.stdout, "removed %s (%s, %s)\n", j.Name, j.ID, j.State); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "only the jobs of `USER` (root)")
	return cmd
}
