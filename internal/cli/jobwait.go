package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newJobWaitCmd builds `job wait`.
func newJobWaitCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait NAME",
		Short: "Wait until a job ends",
		Long: `Wait until the job NAME (a name or an id) has ended. On the way, print one
line per event: each state change with its reason, and warnings such as the
job using more VRAM than it declared. At the end, print how it ended. With
--json, print each event as its JSON object, then the job.

Exit status: 0 when the job ended done; 1 when it ended in any other way
(failed, timed_out, cancelled, infeasible), and also when the wait itself
failed (timeout, Ctrl-C, no such job).`,
		Args: oneArg("job NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout < 0 {
				return usagef("--timeout must not be negative")
			}
			p := api.JobWaitParams{Name: args[0], Timeout: api.Duration(timeout)}
			var raw json.RawMessage
			err := a.stream(cmd.Context(), api.MethodJobWait, p, func(e *api.Event) error {
				switch {
				case a.json:
					return writeEvent(a.stdout, e)
				case e.Type != api.EventJob:
					return nil
				}
				_, err := fmt.Fprintln(a.stdout, jobEventLine(e))
				return err
			}, &raw)
			if errors.Is(err, context.Canceled) {
				return fmt.Errorf("interrupted while waiting for job %q", p.Name)
			}
			if err != nil {
				return err
			}
			var j api.Job
			if err := json.Unmarshal(raw, &j); err != nil {
				return fmt.Errorf("decode job_wait result: %w", err)
			}
			if a.json {
				err = writeJSON(a.stdout, raw)
			} else {
				_, err = fmt.Fprintln(a.stdout, jobSummary(&j))
			}
			if err != nil {
				return err
			}
			if j.State != api.JobDone {
				return exitStatus(exitFailure)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after `DURATION` (0: wait forever)")
	return cmd
}

// jobEventLine shows a job event as "time name state: reason" or
// "time name warning: text".
func jobEventLine(e *api.Event) string {
	ts := "-"
	if !e.Time.IsZero() {
		ts = e.Time.Local().Format("2006-01-02 15:04:05.000")
	}
	name, detail := e.Name, string(e.JobState)
	if j := e.Job; j != nil {
		name = j.Name
		if detail == "" {
			detail = string(j.State)
		}
		if n := len(j.Attempts); n > 0 && detail == string(api.JobRunning) {
			detail += fmt.Sprintf(" (attempt %d)", j.Attempts[n-1].N)
		}
		if j.Reason != "" {
			detail += ": " + j.Reason
		}
	}
	if e.Warning != "" {
		detail = "warning: " + e.Warning
	}
	return strings.TrimRight(fmt.Sprintf("%s  %-16s  %s", ts, name, detail), " ")
}
