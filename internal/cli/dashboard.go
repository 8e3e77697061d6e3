package cli

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/term"
	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// dashResubscribe is the pause before the dashboard subscribes to events
// again after the stream ended.
const dashResubscribe = 2 * time.Second

// errNotTerminal refuses the dashboard on a pipe or a file.
var errNotTerminal = errors.New("dashboard needs a terminal and standard output is not one; " +
	"to print or script, use ps, gpus, jobs, status or events")

// newDashboardCmd builds `dashboard`.
func newDashboardCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "dashboard",
		Short: "Watch GPUs, processes, the queue and events in a terminal UI",
		Long: `Show the GPUs' memory as bars (used, filler, frozen), the host RAM and disk
held by frozen and hibernated processes, the processes by name, the queue and
the latest events, refreshed on every event and every second.

Keys: f freeze, t thaw, h hibernate and k kill (after a y/n) the selected
process; up/down move the selection; r refreshes; ? explains; q quits.
Needs a terminal; colours follow NO_COLOR. docs/dashboard.md has more.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if a.json {
				return usagef("dashboard is interactive and has no --json output; use ps, gpus, jobs, status or events with --json")
			}
			return a.dashboard(cmd.Context())
		},
	}
}

// dashboard runs the terminal UI until q, Ctrl-C or ctx ends.
func (a *app) dashboard(ctx context.Context) error {
	out, ok := a.rawStdout.(*os.File)
	if !ok || !term.IsTerminal(out.Fd()) {
		return errNotTerminal
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	live := &apiSource{dial: a.dial}
	defer live.Close()
	src := scrubbed{live}
	// Fail with the usual sentence, before the screen changes, when the
	// daemon is not there.
	if _, err := src.Status(ctx); err != nil {
		return err
	}
	p := tea.NewProgram(newDashModel(ctx, src, true), tea.WithContext(ctx), tea.WithOutput(out))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		feedEvents(ctx, src, p.Send, dashResubscribe)
	}()
	_, err := p.Run()
	cancel()
	wg.Wait()
	if errors.Is(err, tea.ErrInterrupted) {
		return nil
	}
	return err
}

// feedEvents sends every event of src's events stream as a dashEventMsg,
// and a dashEventsEndedMsg each time the stream ends, subscribing again
// after pause, until ctx ends.
func feedEvents(ctx context.Context, src dashSource, send func(tea.Msg), pause time.Duration) {
	for {
		err := src.Events(ctx, func(e *api.Event) error {
			send(dashEventMsg{event: *e})
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		send(dashEventsEndedMsg{err: err})
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
