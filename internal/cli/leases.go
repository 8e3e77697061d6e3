package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newLeasesCmd builds `leases`.
func newLeasesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "leases",
		Short: "List GPU leases",
		Long: `List the GPU leases you may see: their ID, owner, leased GPU indexes, the
memory held on each GPU ("whole" for the whole GPU) and age. A lease ends
with gpuschedctl release ID, or when the acquire that holds it ends.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.LeasesResult
			return a.call(cmd.Context(), api.MethodLeases, nil, &res, func() error {
				return writeLeases(a.stdout, res.Leases)
			})
		},
	}
}

// newReleaseCmd builds `release`.
func newReleaseCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "release ID",
		Short: "End a GPU lease",
		Long: `End the lease ID (see gpuschedctl leases) that an acquire holds. A command
running under that acquire keeps running, but its GPUs are no longer set
aside for it.`,
		Args: oneArg("lease ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var l api.Lease
			return a.call(cmd.Context(), api.MethodRelease, api.ReleaseParams{ID: args[0]}, &l, func() error {
				_, err := fmt.Fprintf(a.stdout, "released lease %s (GPUs %s)\n", l.ID, leaseGPUs(&l))
				return err
			})
		},
	}
}

// writeLeases prints the lease table in the order given.
func writeLeases(w io.Writer, leases []api.Lease) error {
	t := newTable(w)
	fmt.Fprintf(t, "ID\tUSER\tGPUS\tMIB\tAGE\n")
	for i := range leases {
		l := &leases[i]
		held := "whole"
		if l.MiB > 0 {
			held = strconv.FormatUint(l.MiB, 10)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", l.ID, l.User, leaseGPUs(l), held, age(time.Since(l.AcquiredAt)))
	}
	return t.Flush()
}

// leaseGPUs lists a lease's GPU indexes as "0,1", or "-" for none.
func leaseGPUs(l *api.Lease) string {
	s := make([]string, len(l.GPUs))
	for i, g := range l.GPUs {
		s[i] = strconv.Itoa(g.Index)
	}
	return orDash(strings.Join(s, ","))
}
