package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// submitOptions are the flags of submit: one job's settings, or the
// defaults of every line of a jobs file or row of a CSV file.
type submitOptions struct {
	name, vram, dir, user string
	gpus, priority        int
	retries               int
	timeout               time.Duration
	preemptible           bool
	env                   []string
	cleanEnv              bool
	file, csv             string
	nice                  int
	mps                   mpsFlags
}

// submitForm is submit's form with a command, for the hints that show
// where CMD goes.
const submitForm = "submit [flags] -- CMD [ARGS...]"

// newSubmitCmd builds `submit`.
func newSubmitCmd(a *app) *cobra.Command {
	var o submitOptions
	cmd := &cobra.Command{
		Use:   "submit [flags] (-- CMD [ARGS...] | --file FILE | --csv FILE)",
		Short: "Queue jobs that start when their GPU memory is free",
		Long: `Queue jobs. The daemon starts each one as soon as GPUs have the memory it
declares (--vram per GPU, on --gpus GPUs), higher --priority first. A job runs
as the calling user in --dir (default: the current directory) with this
shell's environment plus the --env values (only the --env values with
--clean-env).

Give the jobs in one of three ways:
  -- CMD [ARGS...]  one job running that argv; no shell is involved
  --file FILE       one job per line of a jobs file (-: standard input)
  --csv FILE        one job per row of a CSV file
The jobs of a file are all queued, or none: every bad line or row is
reported, as FILE:LINE: message, and nothing is sent to the daemon.

Jobs file: each line is a shell command, run as /bin/sh -c LINE. Blank lines
and lines starting with # are skipped. Lines are at most 64 KiB. A line may
start with options in brackets, which replace the flags for that line:
  [vram=18G gpus=2 priority=5 timeout=2h retries=2 preemptible name=a] CMD
  vram=SIZE    memory per GPU: 18G, 512M, 40960 (MiB), or auto (the peak
               of earlier runs of the same command)
  gpus=N       number of GPUs, 1 or more
  priority=N   higher starts first
  timeout=D    per attempt: a duration (90m, 2h30m) or whole seconds
  retries=N    out-of-memory retries, each with a raised declaration
  preemptible  may be frozen to make room for higher priorities
               (preemptible=true or preemptible=false also work)
  name=NAME    the job's name, unique in the file (default: the daemon's
               job-N)
  nice=N       CPU nice value of every thread, -20..19 (below 0: root)
  mps_threads=PERCENT  run as an NVIDIA MPS client with this share of
               each GPU's threads, 1..100
  mps_mem_limit=SIZE   MPS memory limit per GPU (default: vram); see
               docs/mps.md
A command that itself starts with "[" goes after an empty block:
  [] [ -f data.bin ] && ./train.sh

CSV file: rows of directory,executable,filename,epochs,priority. Each runs
EXECUTABLE FILENAME --epochs EPOCHS in DIRECTORY (an absolute path), with
the flags for everything else; an empty epochs leaves --epochs out, an empty
priority takes --priority. A first row of exactly those column names is
skipped, and so are lines starting with #.

Prints one line per queued job: its name, id, state and VRAM declaration.`,
		Example: `  gpuschedctl submit --name train --vram 18G --retries 2 -- python train.py --lr 3e-4
  gpuschedctl submit --vram auto --file sweep.txt
  generate-sweep | gpuschedctl submit --gpus 2 --file -
  gpuschedctl submit --vram 20G --timeout 12h --csv runs.csv`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := o.params(cmd.InOrStdin(), cmd.ArgsLenAtDash(), args)
			if err != nil {
				return err
			}
			if err := checkRequestSize(p); err != nil {
				return err
			}
			var res api.SubmitResult
			return a.call(cmd.Context(), api.MethodSubmit, p, &res, func() error {
				return writeSubmitted(a.stdout, res.Jobs)
			})
		},
	}
	cmd.SetFlagErrorFunc(commandFlagError(submitForm, 0))
	f := cmd.Flags()
	f.StringVar(&o.name, "name", "", "job `NAME` (default: job-N, from the daemon); not with --file or --csv")
	f.StringVar(&o.vram, "vram", "", "memory per GPU: a `SIZE` such as 18G, or auto (default: undeclared, whole idle GPUs)")
	f.IntVar(&o.gpus, "gpus", 1, "number `N` of GPUs per job")
	f.IntVar(&o.priority, "priority", 0, "queue priority `N`: higher starts first")
	f.DurationVar(&o.timeout, "timeout", 0, "end an attempt after `DURATION` (0: no limit)")
	f.IntVar(&o.retries, "retries", 0, "out-of-memory retries `N`, each with a raised declaration")
	f.BoolVar(&o.preemptible, "preemptible", false, "let higher-priority jobs freeze it to make room")
	f.StringVar(&o.dir, "dir", "", "working directory `DIR` (default: the current directory)")
	f.StringArrayVar(&o.env, "env", nil, "set `KEY=VALUE` in the environment (repeatable)")
	f.BoolVar(&o.cleanEnv, "clean-env", false, "do not pass this shell's environment, only --env")
	f.StringVar(&o.user, "user", "", "queue as `USER` (root only)")
	f.StringVar(&o.file, "file", "", "queue one job per line of jobs `FILE` (-: standard input)")
	f.StringVar(&o.csv, "csv", "", "queue one job per row of CSV `FILE`")
	f.IntVar(&o.nice, "nice", 0, "CPU nice value `N` of every thread, -20..19 (below 0 needs root)")
	o.mps.register(cmd, true)
	return cmd
}

// params builds the submit request: the command after -- (dash is where
// it starts) or the jobs of --file or --csv, with the flags as defaults.
func (o *submitOptions) params(stdin io.Reader, dash int, args []string) (api.SubmitParams, error) {
	var p api.SubmitParams
	if err := o.checkSource(dash, args); err != nil {
		return p, err
	}
	defaults, err := o.defaults()
	if err != nil {
		return p, err
	}
	switch {
	case o.file != "":
		p.Jobs, err = readJobs(stdin, o.file, parseJobsFile, defaults)
	case o.csv != "":
		p.Jobs, err = readJobs(stdin, o.csv, parseJobsCSV, defaults)
	default:
		p.JobSpec = defaults
		p.Cmd = args
		return p, nil
	}
	// A batch sends the environment once, as the default of every job.
	p.Env = defaults.Env
	for i := range p.Jobs {
		p.Jobs[i].Env = nil
	}
	return p, err
}

// checkSource makes sure exactly one of a command, --file and --csv is
// given.
func (o *submitOptions) checkSource(dash int, args []string) error {
	switch {
	case dash < 0 && len(args) > 0:
		return usagef("put the command after --: " + submitForm)
	case dash > 0:
		return usagef("unexpected arguments before --: %s", strings.Join(args[:dash], " "))
	case dash == 0 && len(args) == 0:
		return usagef("missing command after --")
	}
	given := 0
	for _, s := range []bool{dash == 0, o.file != "", o.csv != ""} {
		if s {
			given++
		}
	}
	switch {
	case given == 0:
		return usagef("nothing to submit: give -- CMD [ARGS...], --file FILE or --csv FILE")
	case given > 1:
		return usagef("give only one of -- CMD, --file and --csv")
	case o.name != "" && dash < 0:
		return usagef("--name names the job of a command after --; name a jobs file's lines with [name=NAME]")
	}
	return nil
}

// defaults is the job the flags describe, without its command.
func (o *submitOptions) defaults() (api.JobSpec, error) {
	switch {
	case o.gpus < 1:
		return api.JobSpec{}, usagef("--gpus must be 1 or more")
	case o.retries < 0:
		return api.JobSpec{}, usagef("--retries must not be negative")
	case o.timeout < 0:
		return api.JobSpec{}, usagef("--timeout must not be negative")
	}
	if o.name != "" {
		if err := api.ValidateName(o.name); err != nil {
			return api.JobSpec{}, usagef("bad --name: %w", err)
		}
	}
	vram, err := api.ParseVRAM(o.vram)
	if err != nil {
		return api.JobSpec{}, usagef("--%w", err) // "--vram: size ..."
	}
	env, err := (&runOptions{env: o.env, cleanEnv: o.cleanEnv}).environment()
	if err != nil {
		return api.JobSpec{}, err
	}
	dir, err := workDir(o.dir)
	if err != nil {
		return api.JobSpec{}, err
	}
	spec := api.JobSpec{Name: o.name, Dir: dir, Env: env, VRAM: vram, GPUs: o.gpus, Priority: o.priority,
		Timeout: api.Duration(o.timeout), Retries: o.retries, Preemptible: o.preemptible, User: o.user, Nice: o.nice}
	if err := o.mps.apply(&spec.MPSThreads, &spec.MPSMemLimit); err != nil {
		return api.JobSpec{}, err
	}
	return spec, nil
}

// jobsParser reads the jobs of a file named name.
type jobsParser func(r io.Reader, name string, defaults api.JobSpec) ([]api.JobSpec, error)

// readJobs parses the file at path, or stdin for "-".
func readJobs(stdin io.Reader, path string, parse jobsParser, defaults api.JobSpec) ([]api.JobSpec, error) {
	if path == "-" {
		return parse(stdin, "stdin", defaults)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parse(f, path, defaults)
}

// checkRequestSize refuses, before sending it, a request longer than the
// daemon reads.
func checkRequestSize(p api.SubmitParams) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode submit params: %w", err)
	}
	const envelope = 64 // {"id":..,"method":"submit","params":...}
	if len(b)+envelope <= api.MaxLineBytes {
		return nil
	}
	return fmt.Errorf("the jobs make a %s request, over the daemon's limit of %s: submit fewer at a time, "+
		"or send a smaller environment with --clean-env and --env", bytesize(uint64(len(b))), bytesize(api.MaxLineBytes))
}

// writeSubmitted prints one line per queued job.
func writeSubmitted(w io.Writer, jobs []api.Job) error {
	for i := range jobs {
		j := &jobs[i]
		if _, err := fmt.Fprintf(w, "submitted %s: id %s, %s, vram %s\n", j.Name, j.ID, j.State, jobVRAM(j)); err != nil {
			return err
		}
	}
	return nil
}
