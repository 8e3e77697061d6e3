package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newRmCmd builds `rm`.
func newRmCmd(a *app) *cobra.Command {
	var (
		exited bool
		user   string
	)
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Forget exited processes",
		Long: `Forget exited processes: their records and their logs. Each NAME is removed
entirely or not at all; one that cannot be (running, another user's, not
found) is reported and the others are still removed. With --exited, every
exited process of yours is removed (root: of every user, or of --user).

The daemon also forgets exited processes by itself, beyond --keep-finished
per user or --keep-finished-for after they ended (see docs/operations.md).

Exit status 1 when any NAME was not removed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case exited && len(args) > 0:
				return usagef("give NAMEs or --exited, not both")
			case !exited && user != "":
				return usagef("--user goes only with --exited")
			case !exited && len(args) == 0:
				return usagef("missing process NAME (or --exited)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				var proc api.Process
				return a.call(cmd.Context(), api.MethodRm, api.RmParams{Name: args[0]}, &proc, func() error {
					_, err := fmt.Fprintf(a.stdout, "removed %s\n", proc.Name)
					return err
				})
			}
			p := api.RmParams{Names: args}
			if exited {
				p = api.RmParams{Exited: true, User: user}
			}
			return a.rmMany(cmd.Context(), p)
		},
	}
	cmd.Flags().BoolVar(&exited, "exited", false, "remove every exited process of yours (root: of everyone)")
	cmd.Flags().StringVar(&user, "user", "", "with --exited: only the processes of `USER` (root)")
	return cmd
}

// rmMany removes several processes and says, per name, what happened: the
// removed on stdout, the others on stderr with why, and exit status 1 when
// any was not removed.
func (a *app) rmMany(ctx context.Context, p api.RmParams) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var raw json.RawMessage
	if err := c.Call(ctx, api.MethodRm, p, &raw); err != nil {
		return err
	}
	var res api.RmResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return fmt.Errorf("decode rm result: %w", err)
	}
	if a.json {
		if err := writeJSON(a.stdout, raw); err != nil {
			return err
		}
	} else {
		for _, proc := range res.Removed {
			if _, err := fmt.Fprintf(a.stdout, "removed %s\n", proc.Name); err != nil {
				return err
			}
		}
		for _, f := range res.Failed {
			fmt.Fprintf(a.stderr, "gpuschedctl: rm %s: %s (%s)\n", f.Name, f.Error, f.Code)
		}
	}
	if len(res.Failed) > 0 {
		return exitStatus(exitFailure)
	}
	return nil
}
