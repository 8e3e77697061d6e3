package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
	"github.com/spf13/cobra"
)

// The disk tier: hibernate, fork, snapshots, snapshot rm and set.

// newHibernateCmd builds `hibernate`.
func newHibernateCmd(a *app) *cobra.Command {
	var (
		lockTimeout time.Duration
		full        bool
	)
	cmd := &cobra.Command{
		Use:   "hibernate NAME",
		Short: "Move a process to disk (CRIU)",
		Long: `Hibernate NAME: freeze it if it runs (GPU memory into host RAM), then dump its
whole tree with CRIU into a new snapshot and end it in memory. It then holds
neither GPU memory nor host RAM; thaw restores it from disk.

A repeat hibernate writes only the pages that changed since the process's last
snapshot (the parent); --full writes every page. Prints the snapshot, what
this dump wrote, the pages left in the parent and the time of each phase.`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if lockTimeout < 0 {
				return usagef("--lock-timeout must not be negative")
			}
			p := api.HibernateParams{Name: args[0], LockTimeout: api.Duration(lockTimeout), Full: full}
			var res api.HibernateResult
			return a.call(cmd.Context(), api.MethodHibernate, p, &res, func() error { return writeHibernate(a.stdout, &res) })
		},
	}
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", 0, "when it runs, wait this `DURATION` for in-flight CUDA work (default: the daemon's)")
	cmd.Flags().BoolVar(&full, "full", false, "write a full image, not one incremental on the last snapshot")
	return cmd
}

// writeHibernate prints a hibernate:
//
//	hibernated train to snapshot 056247a3-... in 796ms (freeze 3.10ms, dump 743ms)
//	wrote 54.0 MiB; 3407 of 17135 pages reused from parent eb61454e; 8.0 GiB of GPU memory in the image
func writeHibernate(w io.Writer, r *api.HibernateResult) error {
	if _, err := fmt.Fprintf(w, "hibernated %s to snapshot %s in %s (%s)\n",
		r.Name, r.Snapshot, ms(r.MS["total"]), phases(r.MS)); err != nil {
		return err
	}
	reuse := "full image of " + api.Plural(r.Pages, "page", "pages")
	if r.Parent != "" {
		reuse = fmt.Sprintf("%d of %s reused from parent %s", r.Reused, api.Plural(r.Pages, "page", "pages"), shortID(r.Parent))
	}
	gpu := "no GPU memory"
	if r.GPUBytes > 0 {
		gpu = bytesize(r.GPUBytes) + " of GPU memory"
	}
	_, err := fmt.Fprintf(w, "wrote %s; %s; %s in the image\n", bytesize(r.Written), reuse, gpu)
	return err
}

// newForkCmd builds `fork`.
func newForkCmd(a *app) *cobra.Command {
	var (
		copies  int
		gpus    []string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "fork NAME --copies N",
		Short: "Start copies of a process from one image",
		Long: `Dump NAME with CRIU, leaving it as it was (running or frozen), and restore N
independent copies from that one image, named NAME-1 .. NAME-N, each in its
own PID namespace with its own log. They run on NAME's GPUs, or with --gpus
copy i runs on the i-th GPU given (for a process on one GPU).`,
		Example: `  gpuschedctl fork warm --copies 3
  gpuschedctl fork warm --copies 2 --gpus 0,1`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			if copies < 1 {
				return usagef("fork needs --copies N, 1 or more")
			}
			if timeout < 0 {
				return usagef("--timeout must not be negative")
			}
			refs, err := parseGPURefs(gpus)
			if err != nil {
				return err
			}
			if len(refs) > 0 && len(refs) != copies {
				return usagef("--gpus names %s for %s: give one per copy", api.Plural(len(refs), "GPU", "GPUs"), api.Plural(copies, "copy", "copies"))
			}
			p := api.ForkParams{Name: args[0], Copies: copies, GPUs: refs, Timeout: api.Duration(timeout)}
			var res api.ForkResult
			return a.call(cmd.Context(), api.MethodFork, p, &res, func() error { return writeFork(a.stdout, &res) })
		},
	}
	cmd.Flags().IntVar(&copies, "copies", 0, "number `N` of copies to start")
	cmd.Flags().StringSliceVar(&gpus, "gpus", nil, "`GPU`s (index or UUID) for the copies, one per copy, in order (comma-separated or repeated)")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "wait up to `DURATION` for each copy's GPU memory")
	return cmd
}

// writeFork prints the fork and one summary line per copy.
func writeFork(w io.Writer, r *api.ForkResult) error {
	if _, err := fmt.Fprintf(w, "forked %s into %s from a %s image in %s (%s)\n",
		r.Name, api.Plural(len(r.Copies), "copy", "copies"), bytesize(r.Bytes), ms(r.MS["total"]), phases(r.MS)); err != nil {
		return err
	}
	for i := range r.Copies {
		if _, err := fmt.Fprintln(w, summary(&r.Copies[i])); err != nil {
			return err
		}
	}
	return nil
}

// newSnapshotsCmd builds `snapshots` (alias `snapshot`) and `snapshot rm`.
func newSnapshotsCmd(a *app) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:     "snapshots",
		Aliases: []string{"snapshot"},
		Short:   "List disk snapshots; snapshot rm deletes one",
		Long: `List the snapshots you may see (root: all), oldest first: ID (its first 8
characters; --json gives it whole), the process it was taken of, the owner,
the parent it is incremental on, whether a hibernated process lives in it
(HOLDS), its own size on disk and its age. The last line sums every snapshot
on disk against the daemon's --disk-budget.

Delete one with "gpuschedctl snapshot rm ID".`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var res api.SnapshotsResult
			return a.call(cmd.Context(), api.MethodSnapshots, api.SnapshotsParams{Name: name}, &res, func() error {
				return writeSnapshots(a.stdout, &res)
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "only snapshots of process `NAME`")
	cmd.AddCommand(newSnapshotRmCmd(a))
	return cmd
}

// newSnapshotRmCmd builds `snapshot rm`.
func newSnapshotRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID",
		Short: "Delete a snapshot",
		Long: `Delete the snapshot ID: a whole id, or a prefix of one (such as the 8
characters snapshots shows) that names exactly one of your snapshots.

A snapshot a hibernated process lives in (HOLDS), or that another snapshot is
incremental on (its PARENT), cannot be deleted: thaw or kill that process, or
delete the child first. A process's snapshots go with it when it ends (or is
killed).`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) == 0:
				return usagef("missing snapshot ID")
			case len(args) > 1:
				return usagef("unexpected arguments after %s: %s", args[0], strings.Join(args[1:], " "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			id, err := resolveSnapshot(cmd.Context(), c, args[0])
			if err != nil {
				return err
			}
			var raw json.RawMessage
			if err := c.Call(cmd.Context(), api.MethodDeleteSnapshot, api.DeleteSnapshotParams{ID: id}, &raw); err != nil {
				return err
			}
			var s api.Snapshot
			return a.show(api.MethodDeleteSnapshot, raw, &s, func() error {
				_, err := fmt.Fprintf(a.stdout, "removed snapshot %s of %s (%s)\n", s.ID, s.Name, bytesize(s.Bytes))
				return err
			})
		},
	}
}

// resolveSnapshot turns a short id (a prefix of hex digits and dashes) into
// the one snapshot id it starts; anything else goes to the daemon as it is.
func resolveSnapshot(ctx context.Context, c *api.Client, id string) (string, error) {
	if id == "" || len(id) >= 36 || strings.Trim(id, "0123456789abcdef-") != "" {
		return id, nil
	}
	res, err := c.Snapshots(ctx, api.SnapshotsParams{})
	if err != nil {
		return "", err
	}
	var found []string
	for _, s := range res.Snapshots {
		if strings.HasPrefix(s.ID, id) {
			found = append(found, s.ID)
		}
	}
	switch len(found) {
	case 0:
		return "", &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no snapshot id starts with %q", id)}
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("snapshot id %q is ambiguous: it starts %s", id, strings.Join(found, ", "))
}

// writeSnapshots prints the snapshot table and the total against the budget.
func writeSnapshots(w io.Writer, r *api.SnapshotsResult) error {
	t := newTable(w)
	fmt.Fprintf(t, "ID\tNAME\tUSER\tPARENT\tHOLDS\tSIZE\tCREATED\n")
	for _, s := range r.Snapshots {
		parent := "-"
		if s.Parent != "" {
			parent = shortID(s.Parent)
		}
		holds := "no"
		if s.Holds {
			holds = "yes"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s ago\n",
			shortID(s.ID), s.Name, s.User, parent, holds, bytesize(s.Bytes), age(time.Since(s.CreatedAt)))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s listed; all snapshots take %s of disk (budget %s)\n",
		api.Plural(len(r.Snapshots), "snapshot", "snapshots"), bytesize(r.Bytes), diskBudget(r.Budget))
	return err
}

// newSetCmd builds `set`.
func newSetCmd(a *app) *cobra.Command {
	var o policyFlags
	cmd := &cobra.Command{
		Use:   "set NAME [--priority N] [--pin|--no-pin] [--ttl DURATION] [--idle DURATION]",
		Short: "Change a process's disk-tier policy",
		Long: `Change how the disk tier treats the live process NAME; only the flags given
change. Under RAM pressure frozen processes are hibernated lowest --priority
first, then least recently frozen; a pinned one never is. --ttl hibernates it
once it has been frozen that long, --idle freezes it once its GPUs have been
idle that long; 0 turns either off. A priority above 0 and --pin need root.`,
		Example: `  gpuschedctl set reward --priority -5 --ttl 30m
  gpuschedctl set policy --no-pin --idle 0`,
		Args: oneName,
		RunE: func(cmd *cobra.Command, args []string) error {
			p := api.SetParams{Name: args[0]}
			if err := o.set(cmd, &p); err != nil {
				return err
			}
			var proc api.Process
			return a.call(cmd.Context(), api.MethodSet, p, &proc, func() error {
				_, err := fmt.Fprintf(a.stdout, "%s: %s\n", proc.Name, policyText(proc.Policy))
				return err
			})
		},
	}
	o.register(cmd, false)
	return cmd
}

// policyFlags are the policy flags of run and set.
type policyFlags struct {
	priority  int
	pin       bool
	noPin     bool
	ttl, idle time.Duration
}

// register adds --priority, --pin, --ttl and --idle (and for set --no-pin).
func (o *policyFlags) register(cmd *cobra.Command, forRun bool) {
	f := cmd.Flags()
	f.IntVar(&o.priority, "priority", 0, "disk-tier priority `N`, -1000..1000: lower is hibernated first (above 0 needs root)")
	f.BoolVar(&o.pin, "pin", false, "never hibernate it to make room (needs root)")
	if !forRun {
		f.BoolVar(&o.noPin, "no-pin", false, "let it be hibernated to make room again")
	}
	f.DurationVar(&o.ttl, "ttl", 0, "hibernate it once it has been frozen this `DURATION` (0: never)")
	f.DurationVar(&o.idle, "idle", 0, "freeze it once its GPUs have been idle this `DURATION` (0: never)")
}

// check refuses negative durations.
func (o *policyFlags) check() error {
	if o.ttl < 0 {
		return usagef("--ttl must not be negative")
	}
	if o.idle < 0 {
		return usagef("--idle must not be negative")
	}
	return nil
}

// set fills p with the policy flags given on the command line, and only
// those.
func (o *policyFlags) set(cmd *cobra.Command, p *api.SetParams) error {
	if err := o.check(); err != nil {
		return err
	}
	f := cmd.Flags()
	if f.Changed("pin") && f.Changed("no-pin") {
		return usagef("give --pin or --no-pin, not both")
	}
	if f.Changed("priority") {
		p.Priority = &o.priority
	}
	if f.Changed("pin") {
		p.Pin = &o.pin
	}
	if f.Changed("no-pin") {
		pin := !o.noPin
		p.Pin = &pin
	}
	if f.Changed("ttl") {
		d := api.Duration(o.ttl)
		p.TTL = &d
	}
	if f.Changed("idle") {
		d := api.Duration(o.idle)
		p.Idle = &d
	}
	if p.Priority == nil && p.Pin == nil && p.TTL == nil && p.Idle == nil {
		return usagef("nothing to set: give --priority, --pin, --no-pin, --ttl or --idle")
	}
	return nil
}

// policyText shows a policy: "priority 5, pinned, ttl 30m, idle off".
func policyText(p api.Policy) string {
	pin := "not pinned"
	if p.Pin {
		pin = "pinned"
	}
	return fmt.Sprintf("priority %d, %s, ttl %s, idle %s", p.Priority, pin, offDuration(p.TTL), offDuration(p.Idle))
}

// offDuration shows a policy duration, "off" for 0, without trailing zero
// units: "30m", "1h30m", "45s".
func offDuration(d api.Duration) string {
	if d == 0 {
		return "off"
	}
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// diskBudget shows --disk-budget: "500.0 GiB" or "unlimited".
func diskBudget(n uint64) string {
	if n == 0 {
		return "unlimited"
	}
	return bytesize(n)
}

// shortID is the first 8 characters of a snapshot id.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
