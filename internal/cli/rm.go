package cli

import (
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newRmCmd builds `rm`.
func newRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Forget an exited process",
		Args:  oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			var proc api.Process
			return a.call(cmd.Context(), api.MethodRm, api.NameParams{Name: args[0]}, &proc, func() error {
				_, err := fmt.Fprintf(a.stdout, "removed %s\n", proc.Name)
				return err
			})
		},
	}
}
