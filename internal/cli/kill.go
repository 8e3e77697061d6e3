package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newKillCmd builds `kill`.
func newKillCmd(a *app) *cobra.Command {
	var (
		grace  time.Duration
		signal string
	)
	cmd := &cobra.Command{
		Use:   "kill NAME",
		Short: "End a managed process tree",
		Long: `End the whole process tree of NAME: SIGTERM, then SIGKILL after the grace
period (the daemon's default unless --grace), and print its final state.
With --signal, send only that signal to the tree and return at once.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := api.KillParams{Name: args[0], Signal: signalName(signal), Grace: api.Duration(grace)}
			var proc api.Process
			return a.call(cmd.Context(), api.MethodKill, p, &proc, func() error {
				_, err := fmt.Fprintln(a.stdout, summary(&proc))
				return err
			})
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 0, "`DURATION` between SIGTERM and SIGKILL (default: the daemon's)")
	cmd.Flags().StringVar(&signal, "signal", "", "send only signal `SIG`, e.g. TERM, SIGUSR1 or 10")
	return cmd
}

// signalName spells a signal the way the daemon expects: "term" -> "SIGTERM".
func signalName(s string) string {
	s = strings.ToUpper(strings.TrimSpace(s))
	if _, err := strconv.Atoi(s); s == "" || err == nil || strings.HasPrefix(s, "SIG") {
		return s
	}
	return "SIG" + s
}
