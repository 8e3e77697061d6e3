package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/charmbracelet/x/term"
	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newLogsCmd builds `logs`.
func newLogsCmd(a *app) *cobra.Command {
	var (
		lines  int
		follow bool
		raw    bool
	)
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a process's log",
		Long: `Print the last lines of NAME's log (stdout and stderr together). With -f,
keep printing new lines until the process exits or Ctrl-C. With --json and
-f, each line is printed as its log event.

The daemon returns at most the last 65,536 lines and MiB of a log per
call; when older lines asked for lie beyond them, a note on stderr says
they were left out. A line over 64 KiB is printed cut, ending in " [cut]".

The lines are printed as the process wrote them, colours and all, except
where root reads another user's process on a terminal: then the
characters a terminal acts on are escaped (\e, \r, ...), as the rest of
gpuschedctl prints what users chose; --raw prints them as they are.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.logs(cmd.Context(), api.LogsParams{Name: args[0], Lines: &lines, Follow: follow}, raw)
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "print the last `N` lines (-1: all retained lines)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the process exits")
	cmd.Flags().BoolVar(&raw, "raw", false, "print another user's lines as they are, terminal controls included")
	return cmd
}

// logs prints the last lines of a process's log, and with p.Follow the new
// ones until it exits or Ctrl-C, to where linesOut says.
func (a *app) logs(ctx context.Context, p api.LogsParams, raw bool) error {
	out, err := a.linesOut(ctx, p.Name, raw)
	if err != nil {
		return err
	}
	if p.Follow {
		return a.followLogs(ctx, p, out)
	}
	var res api.LogsResult
	return a.call(ctx, api.MethodLogs, p, &res, func() error {
		if res.Truncated {
			fmt.Fprintf(a.stderr, "gpuschedctl: older lines of %s left out: the daemon returns at most the last 65,536 lines and MiB of a log\n", res.Name)
		}
		for _, l := range res.Lines {
			if _, err := fmt.Fprintln(out, l); err != nil {
				return err
			}
		}
		return nil
	})
}

// followLogs prints log events to out until the process exits or Ctrl-C.
func (a *app) followLogs(ctx context.Context, p api.LogsParams, out io.Writer) error {
	err := a.stream(ctx, api.MethodLogs, p, func(e *api.Event) error {
		switch {
		case e.Type != api.EventLog:
			return nil
		case a.json:
			return writeEvent(a.stdout, e)
		}
		_, err := fmt.Fprintln(out, e.Line)
		return err
	}, nil)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// linesOut is where a log's lines go: stdout as it is, unless root reads
// another user's process on a terminal (and not raw): then escaped
// (safeWriter). Only root may read another user's log, and only a
// terminal acts on what it is sent: only then is it asked whose it is.
func (a *app) linesOut(ctx context.Context, name string, raw bool) (io.Writer, error) {
	if f, ok := a.rawStdout.(*os.File); raw || a.json || os.Geteuid() != 0 || !ok || !term.IsTerminal(f.Fd()) {
		return a.rawStdout, nil
	}
	c, err := a.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	p, err := c.Process(ctx, name)
	if err != nil {
		return nil, err
	}
	if p.UID != 0 {
		return a.stdout, nil
	}
	return a.rawStdout, nil
}
