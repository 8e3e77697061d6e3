package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// runOptions are the flags of run.
type runOptions struct {
	gpus     []string
	env      []string
	cleanEnv bool
	dir      string
	nice     int
	user     string
	policy   policyFlags
	mps      mpsFlags
	filled   float64
	// filledSet: --filled was given (0 then is a mistake, not "off").
	filledSet bool
}

// runForm is run's form, for the hints that show where CMD goes.
const runForm = "run NAME [flags] -- CMD [ARGS...]"

// newRunCmd builds `run`.
func newRunCmd(a *app) *cobra.Command {
	var o runOptions
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Start a managed process",
		Long: `Start CMD as the managed process NAME, as the calling user.

The command goes after --; no shell is involved. By default the process gets
this shell's environment (PATH, virtualenv, ...) plus the --env values; with
--clean-env it gets only the --env values. It runs in --dir, by default the
current directory. Without --gpu it sees every GPU. --priority, --pin, --ttl
and --idle set its disk-tier policy (see gpuschedctl set --help).

--filled R attaches a memory filler to the process's single GPU: the GPU's
total usage is held at R of its memory while the process frees and
re-allocates, and the filler is released when the process exits. The filler
gives back within one --filler-tick what the process takes, so keep the
process's allocation steps below the free room R leaves (5% of the GPU at
0.95). It is refused when the GPU already has a filler (see gpuschedctl fill
--help).`,
		Example: `  gpuschedctl run train --gpu 0 -- python train.py --lr 3e-4
  gpuschedctl run eval --gpu GPU-5f0c... --clean-env --env PATH=/usr/bin -- ./eval.sh
  gpuschedctl run rollout --gpu 1 --filled 0.95 -- python rollout.py`,
		Args: runArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.filledSet = cmd.Flags().Changed("filled")
			p, err := o.params(args[0], args[1:])
			if err != nil {
				return err
			}
			var proc api.Process
			return a.call(cmd.Context(), api.MethodRun, p, &proc, func() error {
				_, err := fmt.Fprintln(a.stdout, "started "+summary(&proc))
				return err
			})
		},
	}
	cmd.SetFlagErrorFunc(commandFlagError(runForm, 1))
	f := cmd.Flags()
	f.StringSliceVar(&o.gpus, "gpu", nil, "GPU `REF` (index or UUID) to use (repeatable, or comma-separated)")
	f.StringArrayVar(&o.env, "env", nil, "set `KEY=VALUE` in the environment (repeatable)")
	f.BoolVar(&o.cleanEnv, "clean-env", false, "do not pass this shell's environment, only --env")
	f.StringVar(&o.dir, "dir", "", "working directory `DIR` (default: the current directory)")
	f.IntVar(&o.nice, "nice", 0, "CPU nice value `N`, -20..19 (below 0 needs root)")
	f.StringVar(&o.user, "user", "", "run as `USER` (root only)")
	o.mps.register(cmd, false)
	f.Float64Var(&o.filled, "filled", 0, "hold its GPU's total memory usage at `RATIO` (0 < RATIO <= 1) with a filler while it runs")
	o.policy.register(cmd, true)
	return cmd
}

// runArgs accepts NAME -- CMD [ARGS...].
func runArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0:
		return usagef("put the command after --: " + runForm)
	case dash == 0:
		return usagef("missing process NAME before --")
	case dash > 1:
		return usagef("unexpected arguments before --: %s", strings.Join(args[1:dash], " "))
	case len(args) == dash:
		return usagef("missing command after --")
	}
	return nil
}

// parseGPURefs parses --gpu values (index or UUID).
func parseGPURefs(values []string) ([]api.GPURef, error) {
	var refs []api.GPURef
	for _, s := range values {
		ref, err := api.ParseGPURef(strings.TrimSpace(s))
		if err != nil {
			return nil, usagef("bad --gpu %q: %w", s, err)
		}
		refs = append(refs, ref)
	}
	return refs, nil
}

// params builds the run request from the flags.
func (o *runOptions) params(name string, argv []string) (api.RunParams, error) {
	p := api.RunParams{Name: name, Cmd: argv, Nice: o.nice, User: o.user,
		Priority: o.policy.priority, Pin: o.policy.pin, TTL: api.Duration(o.policy.ttl), Idle: api.Duration(o.policy.idle)}
	if err := o.policy.check(); err != nil {
		return p, err
	}
	if err := o.mps.apply(&p.MPSThreads, &p.MPSMemLimit); err != nil {
		return p, err
	}
	if o.filledSet {
		if !validRatio(o.filled) {
			return p, usagef("--filled must be more than 0 and at most 1")
		}
		p.Filled = o.filled
	}
	refs, err := parseGPURefs(o.gpus)
	if err != nil {
		return p, err
	}
	p.GPUs = refs
	env, err := o.environment()
	if err != nil {
		return p, err
	}
	p.Env = env
	if p.Dir, err = workDir(o.dir); err != nil {
		return p, err
	}
	return p, nil
}

// environment is the caller's environment (unless --clean-env) with the
// --env values on top.
func (o *runOptions) environment() (map[string]string, error) {
	env := map[string]string{}
	if !o.cleanEnv {
		for _, kv := range os.Environ() {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				env[k] = v
			}
		}
	}
	for _, kv := range o.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("bad --env %q: want KEY=VALUE", kv)
		}
		env[k] = v
	}
	return env, nil
}

// workDir makes dir absolute, defaulting to the current directory.
func workDir(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("current directory: %w", err)
		}
		return wd, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--dir %q: %w", dir, err)
	}
	return abs, nil
}
