package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newJobCmd builds `job` and its subcommands wait, logs and cancel.
func newJobCmd(a *app) *cobra.Command {
	var wide bool
	cmd := &cobra.Command{
		Use:   "job NAME",
		Short: "Show a job in detail; job wait, job logs and job cancel act on one",
		Long: `Show the job NAME (a name or an id): its state and why, its command, its
VRAM declaration per GPU as submitted and as it stands now (auto resolved,
raised after an out-of-memory retry), its limits, the peak memory per GPU over
all attempts, the verdict on its declaration once it ended, and each attempt:
its GPUs, declaration, start, duration, exit, peak per GPU and outcome. GPUs
are shown by index; --wide (and --json) shows their UUIDs.

  gpuschedctl job wait NAME     wait until it ends
  gpuschedctl job logs NAME     print its output
  gpuschedctl job cancel NAME   cancel it

A job named wait, logs or cancel is shown with "gpuschedctl job -- NAME".`,
		Args: oneArg("job NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.json {
				return a.call(cmd.Context(), api.MethodJob, api.JobParams{Name: args[0]}, new(api.Job), nil)
			}
			return a.showJob(cmd.Context(), args[0], wide)
		},
	}
	cmd.Flags().BoolVar(&wide, "wide", false, "show GPUs by UUID, not by index")
	cmd.AddCommand(newJobWaitCmd(a), newJobLogsCmd(a), newCancelCmd(a))
	return cmd
}

// newCancelCmd builds `cancel`, both `job cancel` and its top-level alias.
func newCancelCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a job",
		Long: `Cancel the job NAME (a name or an id): a queued job leaves the queue, a
running or preempted one has its whole process tree ended. Prints the job
once it is cancelled.`,
		Args: oneArg("job NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var j api.Job
			return a.call(cmd.Context(), api.MethodCancel, api.JobParams{Name: args[0]}, &j, func() error {
				_, err := fmt.Fprintln(a.stdout, jobSummary(&j))
				return err
			})
		},
	}
}

// newJobLogsCmd builds `job logs`.
func newJobLogsCmd(a *app) *cobra.Command {
	var (
		lines  int
		follow bool
		raw    bool
	)
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print a job's output",
		Long: `Print the last lines of the output (stdout and stderr together) of the job
NAME (a name or an id): the log of its managed process, as gpuschedctl logs
shows it (another user's escaped for root, unless --raw). With -f, keep
printing new lines until it exits or Ctrl-C. A job has no output before its
first attempt starts.`,
		Args: oneArg("job NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := a.job(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if j.Process == "" {
				return fmt.Errorf("job %q has no output yet: %s", j.Name, jobStateText(j))
			}
			return a.logs(cmd.Context(), api.LogsParams{Name: j.Process, Lines: &lines, Follow: follow}, raw)
		},
	}
	cmd.Flags().IntVarP(&lines, "lines", "n", 100, "print the last `N` lines (-1: all retained lines)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the job's process exits")
	cmd.Flags().BoolVar(&raw, "raw", false, "print another user's lines as they are, terminal controls included")
	return cmd
}

// showJob prints one job, its GPUs by index (by UUID when wide).
func (a *app) showJob(ctx context.Context, name string, wide bool) error {
	c, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	j, err := c.Job(ctx, name)
	if err != nil {
		return err
	}
	var label gpuLabel
	if !wide {
		gpus, err := c.GPUs(ctx)
		if err != nil {
			return err
		}
		label = gpuLabel{}
		for _, g := range gpus {
			label[g.UUID] = g.Index
		}
	}
	return writeJob(a.stdout, j, label)
}

// job looks up one job by name or id.
func (a *app) job(ctx context.Context, name string) (*api.Job, error) {
	c, err := a.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Job(ctx, name)
}

// jobStateText is a job's state with how it ended or why it waits:
// "failed (exit 3): out of memory".
func jobStateText(j *api.Job) string {
	s := string(j.State)
	if j.Exit != nil && j.State.Terminal() {
		s += " (" + exitText(j.Exit) + ")"
	}
	if j.Reason != "" {
		s += ": " + j.Reason
	}
	return s
}

// jobSummary is a one-line account of a job:
// "train: done (exit 0); declared 18.0 GiB, peak 17.2 GiB".
func jobSummary(j *api.Job) string {
	s := j.Name + ": " + jobStateText(j)
	if j.Verdict != "" {
		s += "; " + j.Verdict
	}
	return s
}

// writeJob prints one job as "key: value" lines, then its attempts, with
// its GPUs named by label.
func writeJob(w io.Writer, j *api.Job, label gpuLabel) error {
	t := newTable(w)
	fmt.Fprintf(t, "name:\t%s\n", j.Name)
	fmt.Fprintf(t, "id:\t%s\n", j.ID)
	fmt.Fprintf(t, "state:\t%s\n", jobStateText(j))
	fmt.Fprintf(t, "user:\t%s (uid %d)\n", j.User, j.UID)
	fmt.Fprintf(t, "cmd:\t%s\n", cmdline(j.Cmd))
	fmt.Fprintf(t, "dir:\t%s\n", j.Dir)
	fmt.Fprintf(t, "vram:\t%s\n", vramDetail(j))
	fmt.Fprintf(t, "gpus:\t%d\n", j.GPUs)
	fmt.Fprintf(t, "priority:\t%d\n", j.Priority)
	fmt.Fprintf(t, "preemptible:\t%s\n", yesNo(j.Preemptible))
	fmt.Fprintf(t, "nice:\t%d (%s priority)\n", j.Nice, priorityClass(j.Nice))
	if j.CPUs != "" {
		fmt.Fprintf(t, "cpus:\t%s (its submitter's)\n", j.CPUs)
	}
	if j.MPSThreads > 0 || j.MPSMemLimit > 0 {
		fmt.Fprintf(t, "mps:\t%s\n", mpsText(j.MPSThreads, j.MPSMemLimit))
	}
	fmt.Fprintf(t, "retries:\t%d of %d left\n", j.RetriesLeft, j.Retries)
	fmt.Fprintf(t, "timeout:\t%s\n", offDuration(j.Timeout))
	fmt.Fprintf(t, "submitted:\t%s\n", since(j.SubmittedAt))
	if !j.StartedAt.IsZero() {
		fmt.Fprintf(t, "started:\t%s\n", since(j.StartedAt))
	}
	if !j.EndedAt.IsZero() {
		fmt.Fprintf(t, "ended:\t%s\n", since(j.EndedAt))
	}
	if j.Process != "" {
		fmt.Fprintf(t, "process:\t%s\n", j.Process)
	}
	fmt.Fprintf(t, "peak:\t%s\n", label.peaks(j.PeakMiB))
	if j.Verdict != "" {
		fmt.Fprintf(t, "verdict:\t%s\n", j.Verdict)
	}
	if len(j.Attempts) == 0 {
		fmt.Fprintf(t, "attempts:\tnone\n")
		return t.Flush()
	}
	if err := t.Flush(); err != nil {
		return err
	}
	return writeAttempts(w, j.Attempts, label)
}

// writeAttempts prints the attempts table after a blank line.
func writeAttempts(w io.Writer, attempts []api.Attempt, label gpuLabel) error {
	t := newTable(w)
	fmt.Fprintf(t, "\nATTEMPT\tGPUS\tVRAM\tSTARTED\tDURATION\tEXIT\tPEAK\tOUTCOME\n")
	for i := range attempts {
		a := &attempts[i]
		vram, exit := "whole", "-"
		if a.VRAMMiB > 0 {
			vram = mib(a.VRAMMiB)
		}
		if a.Exit != nil {
			exit = exitText(a.Exit)
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.N, orDash(label.list(a.GPUs)), vram,
			a.StartedAt.Local().Format("2006-01-02 15:04:05"), attemptDuration(a), exit, label.peaks(a.PeakMiB), outcome(a))
	}
	return t.Flush()
}

// vramDetail shows the declaration now and as submitted:
// "21.6 GiB per GPU (submitted 18G)".
func vramDetail(j *api.Job) string {
	submitted := j.VRAM.String()
	if submitted == "" {
		submitted = "undeclared"
	}
	var now string
	switch {
	case j.VRAMMiB > 0:
		now = mib(j.VRAMMiB) + " per GPU"
	case j.VRAM.Auto:
		now = "auto, not resolved yet"
	default:
		now = "whole GPUs"
	}
	return fmt.Sprintf("%s (submitted %s)", now, submitted)
}

// attemptDuration is how long an attempt ran, or has run so far.
func attemptDuration(a *api.Attempt) string {
	end := a.EndedAt
	if end.IsZero() {
		end = time.Now()
	}
	return age(end.Sub(a.StartedAt))
}

// outcome is how an attempt ended, "running" while it runs, and how often
// it was preempted.
func outcome(a *api.Attempt) string {
	s := a.Outcome
	switch {
	case s != "":
	case a.EndedAt.IsZero():
		s = "running"
	default:
		s = "-"
	}
	if a.Preempted > 0 {
		s += fmt.Sprintf(", preempted %dx", a.Preempted)
	}
	return s
}

// yesNo shows a flag as "yes" or "no".
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
