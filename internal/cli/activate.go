package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newActivateCmd builds `activate`.
func newActivateCmd(a *app) *cobra.Command {
	var (
		evict   []string
		hold    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "activate NAME",
		Short: "Make a process resident, freezing its owner's others to make room",
		Long: `Make NAME resident on its GPUs: thaw it (from RAM or disk) when it is frozen
or hibernated and, when it does not fit, freeze its owner's other running
processes on those GPUs, least recently active first, until it does (one alone
is swapped out). --evict names the processes that may be frozen instead, in
that order. --timeout is how long the last thaw may wait for memory. If NAME
still does not fit, what was frozen is thawed back. A running NAME is left as
it is.

With --hold, print what was done and keep NAME held until Ctrl-C, SIGTERM or
the end of standard input: while held, no activation freezes it to make room.`,
		Example: `  gpuschedctl activate reward
  gpuschedctl activate policy --evict reward --hold`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := api.ActivateParams{Name: args[0], Timeout: api.Duration(timeout)}
			switch {
			case timeout < 0:
				return usagef("--timeout must not be negative")
			case cmd.Flags().Changed("evict") && len(evict) == 0:
				return usagef("--evict needs at least one process name (to freeze nothing, use thaw)")
			}
			if len(evict) > 0 {
				p.Evict = evict
			}
			if hold {
				return a.activateHeld(cmd.Context(), p, cmd.InOrStdin())
			}
			var res api.Activation
			return a.call(cmd.Context(), api.MethodActivate, p, &res, func() error { return writeActivation(a.stdout, &res) })
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&evict, "evict", nil, "freeze only these `NAME`s to make room, in this order (comma-separated or repeated)")
	f.BoolVar(&hold, "hold", false, "keep NAME held until Ctrl-C, SIGTERM or the end of standard input")
	f.DurationVar(&timeout, "timeout", 0, "wait up to `DURATION` for GPU memory on the last thaw")
	return cmd
}

// activateHeld activates p with a hold, prints what it did and keeps the
// hold until ctx ends, Ctrl-C or SIGTERM arrives or stdin ends; then it
// releases it.
func (a *app) activateHeld(ctx context.Context, p api.ActivateParams, stdin io.Reader) error {
	held, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := a.dial(held)
	if err != nil {
		return err
	}
	defer c.Close()
	res, err := c.Hold(held, p)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted while activating " + p.Name)
		}
		return err
	}
	if a.json {
		raw, err := json.Marshal(res)
		if err != nil {
			return err
		}
		err = writeJSON(a.stdout, raw)
	} else if err = writeActivation(a.stdout, res); err == nil {
		_, err = fmt.Fprintf(a.stdout, "holding %s until Ctrl-C, SIGTERM or the end of input\n", p.Name)
	}
	if err != nil {
		return err
	}
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, stdin); close(eof) }()
	select {
	case <-held.Done():
	case <-eof:
	}
	c.Close() // returns once the daemon has ended the hold
	if a.json {
		return nil
	}
	_, err = fmt.Fprintf(a.stdout, "released %s\n", p.Name)
	return err
}

// writeActivation prints what an activation did: a summary line, then each
// freeze and the thaw.
func writeActivation(w io.Writer, r *api.Activation) error {
	if r.Thaw == nil {
		_, err := fmt.Fprintf(w, "%s was already running: nothing to do (%s)\n", r.Name, ms(r.MS["total"]))
		return err
	}
	made := "nothing else frozen"
	if len(r.Frozen) > 0 {
		names := make([]string, len(r.Frozen))
		for i, f := range r.Frozen {
			names[i] = f.Name
		}
		made = "froze " + strings.Join(names, ", ") + " to make room"
	}
	if _, err := fmt.Fprintf(w, "activated %s (was %s) in %s: %s\n", r.Name, r.Was, ms(r.MS["total"]), made); err != nil {
		return err
	}
	for i := range r.Frozen {
		if err := writeCheckpoint(w, &r.Frozen[i]); err != nil {
			return err
		}
	}
	return writeCheckpoint(w, r.Thaw)
}
