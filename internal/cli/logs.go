package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newLogsCmd builds `logs`.
func newLogsCmd(a *app) *cobra.Command {
	var (
		lines  int
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a process's log",
		Long: `Print the last lines of NAME's log (stdout and stderr together). With -f,
keep printing new lines until the process exits or Ctrl-C. With --json and
-f, each line is printed as its log event.

The daemon returns at most the last 65,536 lines and MiB of a log per
call; when older lines asked for lie beyond them, a note on stderr says
they were left out. A line over 64 KiB is printed cut, ending in " [cut]".`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.logs(cmd.Context(), api.LogsParams{Name: args[0], Lines: &lines, Follow: follow})
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "print the last `N` lines (-1: all retained lines)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the process exits")
	return cmd
}

// logs prints the last lines of a process's log, and with p.Follow the new
// ones until it exits or Ctrl-C.
func (a *app) logs(ctx context.Context, p api.LogsParams) error {
	if p.Follow {
		return a.followLogs(ctx, p)
	}
	var res api.LogsResult
	return a.call(ctx, api.MethodLogs, p, &res, func() error {
		if res.Truncated {
			fmt.Fprintf(a.stderr, "gpuschedctl: older lines of %s left out: the daemon returns at most the last 65,536 lines and MiB of a log\n", res.Name)
		}
		for _, l := range res.Lines {
			if _, err := fmt.Fprintln(a.rawStdout, l); err != nil {
				return err
			}
		}
		return nil
	})
}

// followLogs prints log events until the process exits or Ctrl-C.
func (a *app) followLogs(ctx context.Context, p api.LogsParams) error {
	err := a.stream(ctx, api.MethodLogs, p, func(e *api.Event) error {
		switch {
		case e.Type != api.EventLog:
			return nil
		case a.json:
			return writeEvent(a.stdout, e)
		}
		_, err := fmt.Fprintln(a.rawStdout, e.Line)
		return err
	}, nil)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
