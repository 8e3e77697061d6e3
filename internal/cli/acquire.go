package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// releaseTimeout bounds the release at the end of acquire, which runs after
// its context may have ended.
const releaseTimeout = 10 * time.Second

// acquireOptions are the flags of acquire.
type acquireOptions struct {
	gpus, maxUtil, priority int
	minFree                 string
	maxPower                float64
	maxTemp                 int
	gpuIDs                  []string
	timeout                 time.Duration
}

// newAcquireCmd builds `acquire`.
func newAcquireCmd(a *app) *cobra.Command {
	var o acquireOptions
	cmd := &cobra.Command{
		Use:   "acquire [flags] [-- CMD [ARGS...]]",
		Short: "Lease GPUs for work the daemon does not launch",
		Long: `Lease --gpus GPUs that pass the filters (--min-free memory free on each, at
most --max-util utilization, --max-power draw and --max-temp temperature, only among --gpu-ids),
waiting up to --timeout for them (0: fail at once when none fit). Until the
lease ends, the daemon places nothing on what it holds: --min-free on each
GPU, or without it the whole GPUs (but a process frozen on such a GPU may
thaw back beside a lease without --min-free: declare the memory to keep it
from thaws too). The lease lives as long as this command's
connection to the daemon, so it never outlives this command; a non-root
user's lease is released by the daemon after --user-lease-max-hold (the lease
printed says when).

With CMD, run it here (as this user, not under the daemon) with
CUDA_VISIBLE_DEVICES set to the leased GPUs and GPUSCHED_LEASE to the lease
id, its standard input and output passed through; then release the lease and
exit with CMD's exit status (128+N when signal N ended it). Ctrl-C reaches
CMD from the terminal; SIGTERM and SIGHUP sent to gpuschedctl are passed on.

Without CMD, print the lease (id, GPU indexes and UUIDs, memory held,
CUDA_VISIBLE_DEVICES) and hold it until Ctrl-C or SIGTERM, then release it.
With --json the lease is printed as one JSON object.`,
		Example: `  gpuschedctl acquire --gpus 2 --min-free 40G --timeout 30m -- python eval.py
  gpuschedctl acquire --gpu-ids 0,1 --max-util 10`,
		Args: acquireArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := o.params(cmd)
			if err != nil {
				return err
			}
			var argv []string
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				argv = args[dash:]
			}
			return a.acquire(cmd.Context(), p, argv, cmd.InOrStdin())
		},
	}
	cmd.SetFlagErrorFunc(commandFlagError(acquireForm, 0))
	f := cmd.Flags()
	f.IntVar(&o.gpus, "gpus", 1, "number `N` of GPUs to lease")
	f.StringVar(&o.minFree, "min-free", "", "hold `SIZE` (such as 40G) free on each GPU (default: whole idle GPUs)")
	f.IntVar(&o.maxUtil, "max-util", 0, "only GPUs at most `PERCENT` utilized, 1-100")
	f.Float64Var(&o.maxPower, "max-power", 0, "only GPUs drawing at most `WATTS`")
	f.IntVar(&o.maxTemp, "max-temp", 0, "only GPUs at most `DEGREES` C hot")
	f.StringSliceVar(&o.gpuIDs, "gpu-ids", nil, "choose only among these `GPU`s (indexes or UUIDs, comma-separated or repeated)")
	f.DurationVar(&o.timeout, "timeout", 0, "wait up to `DURATION` for GPUs to fit (0: fail at once)")
	f.IntVar(&o.priority, "priority", 0, "lease priority `N`: higher is served first")
	return cmd
}

// acquireForm is acquire's form with a command, for the hints that show
// where CMD goes.
const acquireForm = "acquire [flags] -- CMD [ARGS...]"

// acquireArgs accepts nothing, or a command after --.
func acquireArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 0:
		return usagef("put the command after --: " + acquireForm)
	case dash > 0:
		return usagef("unexpected arguments before --: %s", strings.Join(args[:dash], " "))
	case dash == 0 && len(args) == 0:
		return usagef("missing command after --")
	}
	return nil
}

// params builds the acquire request from the flags.
func (o *acquireOptions) params(cmd *cobra.Command) (api.AcquireParams, error) {
	p := api.AcquireParams{GPUs: o.gpus, MaxUtil: o.maxUtil, MaxPower: o.maxPower, MaxTemp: o.maxTemp,
		Timeout: api.Duration(o.timeout), Priority: o.priority}
	f := cmd.Flags()
	switch {
	case o.gpus < 1:
		return p, usagef("--gpus must be 1 or more")
	case f.Changed("max-util") && (o.maxUtil < 1 || o.maxUtil > 100):
		return p, usagef("--max-util must be a percentage, 1-100")
	case f.Changed("max-power") && (!(o.maxPower > 0) || math.IsInf(o.maxPower, 0)):
		return p, usagef("--max-power must be a number of watts, more than 0")
	case f.Changed("max-temp") && (o.maxTemp < 1 || o.maxTemp > 150):
		return p, usagef("--max-temp must be degrees C, 1-150")
	case o.timeout < 0:
		return p, usagef("--timeout must not be negative")
	}
	if o.minFree != "" {
		n, err := api.ParseMiB(o.minFree)
		if err != nil {
			return p, usagef("bad --min-free: %w", err)
		}
		if n == 0 {
			return p, usagef("--min-free must be more than 0 (leave it out for whole GPUs)")
		}
		p.MinFree = api.VRAM{MiB: n}
	}
	refs, err := parseGPURefs(o.gpuIDs)
	p.GPUIDs = refs
	return p, err
}

// acquire leases GPUs on one connection, kept open while the lease is held.
// With argv it runs that command under the lease; without, it holds the
// lease until ctx ends or Ctrl-C or SIGTERM arrives. Either way it then
// releases the lease.
func (a *app) acquire(ctx context.Context, p api.AcquireParams, argv []string, stdin io.Reader) error {
	var l api.Lease
	h, err := a.callHeld(ctx, api.MethodAcquire, p, &l, "waiting for a lease")
	if err != nil {
		return err
	}
	defer h.close()
	if len(argv) > 0 {
		return a.runLeased(ctx, h.c, &l, argv, stdin)
	}
	if a.json {
		err = writeJSON(a.stdout, h.raw)
	} else {
		err = writeLease(a.stdout, &l)
	}
	if err != nil {
		return err
	}
	<-h.held.Done()
	if err := releaseLease(ctx, h.c, l.ID); err != nil {
		return err
	}
	if a.json {
		return nil
	}
	_, err = fmt.Fprintf(a.stdout, "released lease %s\n", l.ID)
	return err
}

// runLeased runs argv with the lease's GPUs visible, releases the lease on c
// when it ends and exits with its status. Ctrl-C reaches the command from
// the terminal; SIGTERM and SIGHUP are passed on to it, and so is the end of
// ctx, as SIGTERM.
func (a *app) runLeased(ctx context.Context, c *api.Client, l *api.Lease, argv []string, stdin io.Reader) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "CUDA_VISIBLE_DEVICES="+l.CUDAVisibleDevices, "GPUSCHED_LEASE="+l.ID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, a.rawStdout, a.rawStderr
	status, err := waitForwarding(ctx, cmd, sigs)
	if rerr := releaseLease(ctx, c, l.ID); rerr != nil {
		// Closing the connection ends the lease all the same.
		fmt.Fprintf(a.stderr, "gpuschedctl: release lease %s: %s\n", l.ID, errorLine(rerr))
	}
	switch {
	case err != nil:
		return err
	case status != 0:
		return exitStatus(status)
	}
	return nil
}

// waitForwarding starts cmd and waits for it, passing on the signals from
// sigs other than SIGINT (which the terminal sends it itself), and SIGTERM
// when ctx ends. It returns the exit status as a shell reports it: the
// code, or 128+N when signal N ended it.
func waitForwarding(ctx context.Context, cmd *exec.Cmd, sigs <-chan os.Signal) (int, error) {
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := ctx.Done()
	for {
		select {
		case err := <-done:
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				return 0, err
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal()), nil
			}
			return cmd.ProcessState.ExitCode(), nil
		case s := <-sigs:
			if s != os.Interrupt {
				_ = cmd.Process.Signal(s)
			}
		case <-stopped:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			stopped = nil
		}
	}
}

// releaseLease ends lease id on the connection that holds it, also after
// ctx has ended. A lease already released elsewhere has ended as well.
func releaseLease(ctx context.Context, c *api.Client, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := c.Release(ctx, id); err != nil && !api.IsNotFound(err) {
		return err
	}
	return nil
}

// writeLease prints a lease as "key: value" lines and says how long it is
// held: a lease the daemon ends by itself (a user's, after
// --user-lease-max-hold) says when.
func writeLease(w io.Writer, l *api.Lease) error {
	t := newTable(w)
	fmt.Fprintf(t, "lease:\t%s\n", l.ID)
	for i, g := range l.GPUs {
		key := ""
		if i == 0 {
			key = "gpus:"
		}
		fmt.Fprintf(t, "%s\t%d %s\n", key, g.Index, g.UUID)
	}
	fmt.Fprintf(t, "memory:\t%s\n", leaseMemory(l))
	fmt.Fprintf(t, "CUDA_VISIBLE_DEVICES:\t%s\n", l.CUDAVisibleDevices)
	if !l.ExpiresAt.IsZero() {
		fmt.Fprintf(t, "expires:\t%s (the daemon releases it then: --user-lease-max-hold)\n", l.ExpiresAt.Truncate(time.Second).Format(time.RFC3339))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "held until Ctrl-C or SIGTERM")
	return err
}

// leaseMemory is what a lease holds on each GPU: "40.0 GiB per GPU" or
// "whole GPUs".
func leaseMemory(l *api.Lease) string {
	if l.MiB == 0 {
		return "whole GPUs"
	}
	return mib(l.MiB) + " per GPU"
}
