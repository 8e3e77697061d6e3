package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// newFreezeCmd builds `freeze`.
func newFreezeCmd(a *app) *cobra.Command {
	var (
		lockTimeout time.Duration
		noStop      bool
	)
	cmd := &cobra.Command{
		Use:   "freeze NAME",
		Short: "Park a process's GPU memory in host RAM",
		Long: `Freeze NAME: lock every CUDA process of its tree, checkpoint their GPU
memory into host RAM and stop the tree. The GPU memory is free for others
until thaw. Prints the memory moved and the time of each phase.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := api.FreezeParams{Name: args[0], LockTimeout: api.Duration(lockTimeout)}
			if noStop {
				stop := false
				p.Stop = &stop
			}
			var res api.CheckpointResult
			return a.call(cmd.Context(), api.MethodFreeze, p, &res, func() error { return writeCheckpoint(a.stdout, &res) })
		},
	}
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", 0, "wait this `DURATION` for in-flight CUDA work (default: the daemon's)")
	cmd.Flags().BoolVar(&noStop, "no-stop", false, "leave the tree running (without its GPU) instead of stopping it")
	return cmd
}

// newThawCmd builds `thaw`.
func newThawCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "thaw NAME",
		Short: "Bring a frozen or hibernated process back onto its GPUs",
		Long: `Thaw NAME: once its GPUs have room for its memory (plus the daemon's margin),
continue its tree and restore its GPU memory. Without --timeout it fails at
once when the memory does not fit; with it, it waits up to that long.
A hibernated process is first restored from its snapshot on disk (CRIU).`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			var res api.CheckpointResult
			p := api.ThawParams{Name: args[0], Timeout: api.Duration(timeout)}
			return a.call(cmd.Context(), api.MethodThaw, p, &res, func() error { return writeCheckpoint(a.stdout, &res) })
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wait up to `DURATION` for GPU memory to free")
	return cmd
}

// newSwapCmd builds `swap`.
func newSwapCmd(a *app) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "swap OFF ON",
		Short: "Freeze one process and thaw another",
		Long: `Freeze OFF and thaw ON: at the same time when ON fits beside OFF, else one
after the other. If ON cannot be thawed, OFF is thawed back.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("swap takes two process names: OFF (to freeze) and ON (to thaw)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var res api.SwapResult
			p := api.SwapParams{Freeze: args[0], Thaw: args[1], Timeout: api.Duration(timeout)}
			return a.call(cmd.Context(), api.MethodSwap, p, &res, func() error {
				how := "one after the other"
				if res.Concurrent {
					how = "concurrently"
				}
				fmt.Fprintf(a.stdout, "swapped %s off and %s on %s in %s\n", res.Freeze.Name, res.Thaw.Name, how, ms(res.MS["total"]))
				if err := writeCheckpoint(a.stdout, &res.Freeze); err != nil {
					return err
				}
				return writeCheckpoint(a.stdout, &res.Thaw)
			})
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wait up to `DURATION` for GPU memory when run one after the other")
	return cmd
}

// newMigrateCmd builds `migrate`.
func newMigrateCmd(a *app) *cobra.Command {
	var (
		gpus    []string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "migrate NAME --gpu GPU[,GPU...]",
		Short: "Move a process onto other GPUs",
		Long: `Move NAME (running or frozen) onto other GPUs, by index or UUID, one per GPU
it is on, in order. Its GPU memory is checkpointed and restored onto the new
GPUs; it ends running. Needs a driver with device maps.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			refs, err := parseGPURefs(gpus)
			if err != nil {
				return err
			}
			if len(refs) == 0 {
				return usagef("migrate needs --gpu")
			}
			var res api.CheckpointResult
			p := api.MigrateParams{Name: args[0], GPUs: refs, Timeout: api.Duration(timeout)}
			return a.call(cmd.Context(), api.MethodMigrate, p, &res, func() error { return writeCheckpoint(a.stdout, &res) })
		},
	}
	cmd.Flags().StringSliceVar(&gpus, "gpu", nil, "target `GPU` index or UUID (repeat or comma-separate for several)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wait up to `DURATION` for memory on the new GPUs")
	return cmd
}

// writeCheckpoint prints one freeze, thaw or migrate with its phase times:
// "froze train: 8.0 GiB from 2 processes in 12.3ms (lock 1.0ms, checkpoint 11.0ms, stop 0.3ms)".
func writeCheckpoint(w io.Writer, r *api.CheckpointResult) error {
	verb := map[string]string{"freeze": "froze", "thaw": "thawed", "migrate": "migrated"}[r.Op]
	if verb == "" {
		verb = r.Op
	}
	where := ""
	if r.Op != "freeze" && len(r.GPUs) > 0 {
		where = " onto " + strings.Join(r.GPUs, ",")
	}
	from := ""
	if r.Snapshot != "" {
		from = " from disk (snapshot " + shortID(r.Snapshot) + ")"
	}
	_, err := fmt.Fprintf(w, "%s %s%s: %s from %s%s in %s (%s) [%s driver]\n",
		verb, r.Name, from, mib(r.Bytes>>20), api.Plural(len(r.PIDs), "CUDA process", "CUDA processes"), where, ms(r.MS["total"]), phases(r.MS), r.Driver)
	return err
}

// phases lists the phase times in the order they happen.
func phases(m map[string]float64) string {
	order := []string{"freeze_lock", "freeze_checkpoint", "freeze", "dump", "sync", "admit", "criu_restore",
		"lock", "checkpoint", "stop", "continue", "restore", "unlock"}
	rank := map[string]int{}
	for i, k := range order {
		rank[k] = i
	}
	var keys []string
	for k := range m {
		if k != "total" {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		ri, iok := rank[keys[i]]
		rj, jok := rank[keys[j]]
		if iok != jok {
			return iok
		}
		if ri != rj {
			return ri < rj
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + ms(m[k])
	}
	return strings.Join(parts, ", ")
}

// ms prints milliseconds with a precision that suits their size.
func ms(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2fms", v)
	}
	return fmt.Sprintf("%.0fms", v)
}
