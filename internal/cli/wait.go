package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newWaitCmd builds `wait`.
func newWaitCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait NAME",
		Short: "Wait until a process exits",
		Long: `Wait until NAME exits and print its final state.

Exit status: 0 when the process exited with code 0; 1 when it exited with
another code, was killed by a signal or ended unobserved, and also when the
wait itself failed (timeout, Ctrl-C, no such process).`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := api.WaitParams{Name: args[0], Timeout: api.Duration(timeout)}
			var raw json.RawMessage
			err := a.stream(cmd.Context(), api.MethodWait, p, nil, &raw)
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted while waiting for %q", p.Name)
			}
			if err != nil {
				return err
			}
			var proc api.Process
			if err := json.Unmarshal(raw, &proc); err != nil {
				return fmt.Errorf("decode wait result: %w", err)
			}
			if a.json {
				err = writeJSON(a.stdout, raw)
			} else {
				_, err = fmt.Fprintln(a.stdout, summary(&proc))
			}
			if err != nil {
				return err
			}
			if !exitedZero(&proc) {
				return exitStatus(exitFailure)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after `DURATION` (0: wait forever)")
	return cmd
}

// exitedZero reports whether p exited by itself with status 0.
func exitedZero(p *api.Process) bool {
	return p.State == api.StateExited && p.Exit != nil && !p.Exit.Unknown &&
		p.Exit.Signal == "" && p.Exit.Code != nil && *p.Exit.Code == 0
}
