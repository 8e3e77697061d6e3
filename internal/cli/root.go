package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// app holds the global flags and output streams shared by every command.
type app struct {
	stdout, stderr io.Writer // safeWriter: what is printed goes out escaped
	// rawStdout and rawStderr are the streams themselves: for the lines of
	// logs, the command acquire runs, and the dashboard's terminal.
	rawStdout, rawStderr io.Writer
	socket               string
	json                 bool
	connectTimeout       time.Duration
}

const rootLong = `gpuschedctl controls the gpusched daemon, which runs and tracks GPU processes.

The daemon's socket is --socket, else $` + api.SocketEnv + `, else ` + api.DefaultSocket + `.
With --json every command prints its result as one JSON object per line
(streams print one object per event).

Process and job names are per user: NAME is always one of your own, and
another user's of the same name is theirs, not in your way. Root names
another user's as USER/NAME (a user name or uid), or by NAME where root has
none of that name and exactly one user has.

What users' processes chose (a command's arguments, a directory, the text
of an error) is printed with the characters a terminal acts on escaped: \e,
\r, \u202e and the like, and a command's argument as bash's $'...', which
reads back as the argument. logs prints the process's lines as they are,
as cat would, but another user's to root's terminal escaped (logs --raw).

Exit status: 0 on success, 1 when the call failed (one line on stderr), 2 on
bad flags or arguments. wait also exits 1 when the process did not exit 0,
and job wait when the job did not end done; acquire -- CMD exits with CMD's
status.`

// newRoot builds the gpuschedctl command tree over a.
func newRoot(a *app) *cobra.Command {
	var version bool
	root := &cobra.Command{
		Use:   "gpuschedctl",
		Short: "Control the gpusched GPU process daemon",
		Long:  rootLong,
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if version && len(args) == 0 {
				return a.versions(cmd.Context())
			}
			return unknownCommand(cmd, args)
		},
		SilenceUsage:  true,
		SilenceErrors: true,

		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	root.Flags().BoolVar(&version, "version", false, "print gpuschedctl's version, and the daemon's when it answers")
	pf := root.PersistentFlags()
	pf.StringVar(&a.socket, "socket", "", "daemon socket `PATH` (default $"+api.SocketEnv+", else "+api.DefaultSocket+")")
	pf.BoolVar(&a.json, "json", false, "print results as JSON, one object per line")
	pf.DurationVar(&a.connectTimeout, "connect-timeout", 5*time.Second, "give up connecting to the daemon after this long (0: never)")
	root.AddCommand(
		newRunCmd(a), newKillCmd(a), newStatusCmd(a), newPSCmd(a), newLogsCmd(a),
		newWaitCmd(a), newRmCmd(a), newEventsCmd(a), newGPUsCmd(a), newVersionCmd(a),
		newFreezeCmd(a), newThawCmd(a), newSwapCmd(a), newActivateCmd(a), newMigrateCmd(a),
		newHibernateCmd(a), newForkCmd(a), newSnapshotsCmd(a), newSetCmd(a),
		newSubmitCmd(a), newJobsCmd(a), newJobCmd(a), newCancelCmd(a),
		newAcquireCmd(a), newLeasesCmd(a), newReleaseCmd(a),
		newFillCmd(a), newUnfillCmd(a), newFillersCmd(a),
		newDashboardCmd(a),
	)
	return root
}

// unknownCommand runs when no subcommand matched. A mistyped command gets
// its suggestion and a pointer to the list, not the whole usage.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usagef("missing command")
	}
	err := fmt.Errorf("unknown command %q", args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		err = fmt.Errorf("unknown command %q; did you mean %s?", args[0], strings.Join(s, " or "))
	}
	return &usageError{err: err, hint: "Run 'gpuschedctl --help' for the list of commands."}
}

// call makes one request and shows its result.
func (a *app) call(ctx context.Context, method string, params, out any, human func() error) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	var raw json.RawMessage
	if err := c.Call(ctx, method, params, &raw); err != nil {
		return err
	}
	return a.show(method, raw, out, human)
}

// show prints raw with --json; otherwise it decodes raw into out and calls
// human to print it.
func (a *app) show(method string, raw json.RawMessage, out any, human func() error) error {
	if a.json {
		return writeJSON(a.stdout, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode %s result: %w", method, err)
	}
	return human()
}
