package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newEventsCmd builds `events`.
func newEventsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "events [NAME]",
		Short: "Print events as they happen, until Ctrl-C",
		Long: `Print one line per event (time, type, process, state change), of every
process you may see or only of NAME, until Ctrl-C. With --json each event is
one JSON object per line, starting with the "subscribed" event.`,
		Args: optionalName,
		RunE: func(cmd *cobra.Command, args []string) error {
			var p api.EventsParams
			if len(args) == 1 {
				p.Name = args[0]
			}
			err := a.stream(cmd.Context(), api.MethodEvents, p, func(e *api.Event) error {
				switch {
				case a.json:
					return writeEvent(a.stdout, e)
				case e.Type == api.EventSubscribed:
					return nil
				}
				_, err := fmt.Fprintln(a.stdout, eventLine(e))
				return err
			}, nil)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
}

// eventLine shows an event as "time type name prev→state".
func eventLine(e *api.Event) string {
	ts := "-"
	if !e.Time.IsZero() {
		ts = e.Time.Local().Format("2006-01-02 15:04:05.000")
	}
	var detail string
	switch e.Type {
	case api.EventProcess:
		detail = string(e.State)
		if e.PrevState != "" {
			detail = string(e.PrevState) + "→" + detail
		}
		if e.State == api.StateExited && e.Process != nil {
			detail += " (" + exitText(e.Process.Exit) + ")"
		}
	case api.EventLog:
		detail = e.Line
	}
	return strings.TrimRight(fmt.Sprintf("%s  %-8s  %-16s  %s", ts, e.Type, e.Name, detail), " ")
}
