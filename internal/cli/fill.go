package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// fillOptions are the flags of fill.
type fillOptions struct {
	gpu    string
	ratio  float64
	size   string
	detach bool
}

// newFillCmd builds `fill`.
func newFillCmd(a *app) *cobra.Command {
	var o fillOptions
	cmd := &cobra.Command{
		Use:   "fill [GPU] (--ratio R | --mib SIZE) [--detach]",
		Short: "Reserve a GPU's memory for your own work with a filler",
		Long: `Hold the GPU's TOTAL memory usage (everyone's, not only the filler's) at
--ratio of its memory (more than 0, at most 1) or at --mib SIZE (such as 20G),
within one chunk below it. A filler is one helper process per GPU that
allocates device memory in fixed chunks (the daemon's --filler-chunk, 256 MiB
by default), checks the GPU's free memory every --filler-tick, gives back
what others take and grows back when memory frees.

The memory is reserved for your own managed work: your queued jobs see it as
free and the filler hands over a job's declaration (the whole GPU for an
undeclared job) before the job starts, keeps the part of a running job's
declaration it has not allocated yet free, and frees a thaw's memory before
the restore. Other users' jobs and thaws see it as used and wait. A GPU has
at most one filler; filling it again (with or without --detach as before)
changes the target of yours.

By default the filler is held until Ctrl-C or SIGTERM, then released
("released filler on GPU N"); it also ends when this command's connection to
the daemon closes. With --detach the filler is persistent: it stays, also
across a daemon restart, until gpuschedctl unfill. With --json the filler is
printed as one JSON object.`,
		Example: `  gpuschedctl fill --gpu 1 --ratio 0.95
  gpuschedctl fill 0 --mib 20G --detach`,
		Args: optionalGPU,
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := o.params(cmd, args)
			if err != nil {
				return err
			}
			if o.detach {
				var f api.Filler
				return a.call(cmd.Context(), api.MethodFill, p, &f, func() error {
					return writeFiller(a.stdout, &f, "release it with gpuschedctl unfill "+strconv.Itoa(f.Index))
				})
			}
			p.Session = true
			return a.fill(cmd.Context(), p)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.gpu, "gpu", "", "the `GPU` to fill (index or UUID)")
	f.Float64Var(&o.ratio, "ratio", 0, "hold the GPU's total usage at `R` of its memory, more than 0 and at most 1")
	f.StringVar(&o.size, "mib", "", "hold the GPU's total usage at `SIZE` (such as 20G, or MiB)")
	f.BoolVar(&o.detach, "detach", false, "make a persistent filler and return at once (release it with unfill)")
	return cmd
}

// newUnfillCmd builds `unfill`.
func newUnfillCmd(a *app) *cobra.Command {
	var gpu string
	cmd := &cobra.Command{
		Use:   "unfill [GPU]",
		Short: "Release a GPU's filler",
		Long: `Release the filler on GPU (an index or UUID, as an argument or with --gpu):
its helper frees the memory it holds and exits. Only the filler's owner, or
root, may release it. A filler attached to a process (run --filled) is also
released when that process exits.`,
		Example: `  gpuschedctl unfill 1
  gpuschedctl unfill --gpu GPU-5f0c...`,
		Args: optionalGPU,
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := gpuArg(gpu, args)
			if err != nil {
				return err
			}
			var f api.Filler
			return a.call(cmd.Context(), api.MethodUnfill, api.UnfillParams{GPU: &ref}, &f, func() error {
				_, err := fmt.Fprintf(a.stdout, "released filler on GPU %d\n", f.Index)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&gpu, "gpu", "", "the `GPU` to release (index or UUID)")
	return cmd
}

// newFillersCmd builds `fillers`.
func newFillersCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "fillers",
		Short: "List the GPU memory fillers",
		Long: `List every GPU's filler, whoever owns it: the GPU index, its owner, the
total usage it holds the GPU at (TARGET, with the ratio asked for), the
memory its helper holds now (HELD), the part of the target it keeps free for
its owner's launches, thaws and declared growth (RESERVED), its chunk size,
the helper's PID, the managed process it is attached to (run --filled) and
whether it ends with the connection that made it (SESSION). A filler's last
failure, if any, follows the table.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.FillersResult
			return a.call(cmd.Context(), api.MethodFillers, nil, &res, func() error {
				return writeFillers(a.stdout, res.Fillers)
			})
		},
	}
}

// optionalGPU accepts at most one GPU argument.
func optionalGPU(_ *cobra.Command, args []string) error {
	if len(args) > 1 {
		return usagef("unexpected arguments after %s: %s", args[0], strings.Join(args[1:], " "))
	}
	return nil
}

// gpuArg is the GPU named by --gpu or the argument, exactly one of them.
func gpuArg(flag string, args []string) (api.GPURef, error) {
	s := flag
	switch {
	case flag != "" && len(args) > 0:
		return api.GPURef{}, usagef("give the GPU once: as an argument or with --gpu")
	case len(args) > 0:
		s = args[0]
	case flag == "":
		return api.GPURef{}, usagef("missing GPU: give its index or UUID, as an argument or with --gpu")
	}
	ref, err := api.ParseGPURef(s)
	if err != nil {
		return ref, usagef("bad GPU %q: %w", s, err)
	}
	return ref, nil
}

// params builds the fill request from the flags.
func (o *fillOptions) params(cmd *cobra.Command, args []string) (api.FillParams, error) {
	ref, err := gpuArg(o.gpu, args)
	p := api.FillParams{GPU: &ref}
	if err != nil {
		return p, err
	}
	hasRatio := cmd.Flags().Changed("ratio")
	switch {
	case hasRatio == (o.size != ""):
		return p, usagef("give exactly one of --ratio and --mib")
	case hasRatio && !validRatio(o.ratio):
		return p, usagef("--ratio must be more than 0 and at most 1")
	case hasRatio:
		p.Ratio = o.ratio
		return p, nil
	}
	n, err := api.ParseMiB(o.size)
	if err != nil {
		return p, usagef("bad --mib: %w", err)
	}
	if n == 0 {
		return p, usagef("--mib must be more than 0")
	}
	p.MiB = api.VRAM{MiB: n}
	return p, nil
}

// validRatio says whether r is a share of a GPU: more than 0, at most 1.
func validRatio(r float64) bool {
	return !math.IsNaN(r) && r > 0 && r <= 1
}

// fill makes a session filler on one connection, kept open while it is
// held, prints it and holds it until ctx ends or Ctrl-C or SIGTERM arrives;
// then it releases it.
func (a *app) fill(ctx context.Context, p api.FillParams) error {
	var f api.Filler
	h, err := a.callHeld(ctx, api.MethodFill, p, &f, "starting the filler")
	if err != nil {
		return err
	}
	defer h.close()
	if a.json {
		err = writeJSON(a.stdout, h.raw)
	} else {
		err = writeFiller(a.stdout, &f, "held until Ctrl-C or SIGTERM")
	}
	if err != nil {
		return err
	}
	<-h.held.Done()
	if err := releaseFiller(ctx, h.c, *p.GPU); err != nil {
		return err
	}
	if a.json {
		return nil
	}
	_, err = fmt.Fprintf(a.stdout, "released filler on GPU %d\n", f.Index)
	return err
}

// releaseFiller unfills gpu on the connection that holds its session
// filler, also after ctx has ended. A filler already released elsewhere has
// ended as well.
func releaseFiller(ctx context.Context, c *api.Client, gpu api.GPURef) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if _, err := c.Unfill(ctx, gpu); err != nil && !api.IsNotFound(err) {
		return err
	}
	return nil
}

// writeFiller prints a filler as "key: value" lines, then note.
func writeFiller(w io.Writer, f *api.Filler, note string) error {
	t := newTable(w)
	fmt.Fprintf(t, "filler:\tGPU %d %s\n", f.Index, f.UUID)
	fmt.Fprintf(t, "target:\t%s total usage\n", fillerTarget(f))
	fmt.Fprintf(t, "held:\t%s\n", mib(f.HeldMiB))
	if f.ReservedMiB > 0 {
		fmt.Fprintf(t, "reserved:\t%s\n", mib(f.ReservedMiB))
	}
	fmt.Fprintf(t, "chunk:\t%s\n", mib(f.ChunkMiB))
	fmt.Fprintf(t, "pid:\t%d\n", f.PID)
	if f.Error != "" {
		fmt.Fprintf(t, "error:\t%s\n", f.Error)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, note)
	return err
}

// writeFillers prints the filler table in the order given, then the
// fillers' last failures.
func writeFillers(w io.Writer, fillers []api.Filler) error {
	t := newTable(w)
	fmt.Fprintf(t, "GPU\tUSER\tTARGET\tHELD\tRESERVED\tCHUNK\tPID\tPROCESS\tSESSION\n")
	var failures []string
	for i := range fillers {
		f := &fillers[i]
		session := "no"
		if f.Session {
			session = "yes"
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", f.Index, f.User, fillerTarget(f), mib(f.HeldMiB),
			mib(f.ReservedMiB), mib(f.ChunkMiB), f.PID, orDash(f.Process), session)
		if f.Error != "" {
			failures = append(failures, fmt.Sprintf("GPU %d: %s", f.Index, f.Error))
		}
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, s := range failures {
		if _, err := fmt.Fprintln(w, s); err != nil {
			return err
		}
	}
	return nil
}

// fillerTarget shows a filler's target: "76.0 GiB (0.95)", or "20.0 GiB"
// when it was asked in MiB.
func fillerTarget(f *api.Filler) string {
	if f.Ratio == 0 {
		return mib(f.TargetMiB)
	}
	return fmt.Sprintf("%s (%s)", mib(f.TargetMiB), strconv.FormatFloat(f.Ratio, 'g', -1, 64))
}
