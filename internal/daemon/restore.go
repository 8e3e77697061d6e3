package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/internal/treefiles"
	"github.com/gpusched/gpusched/pkg/api"
)

// thawFromDisk brings a hibernated process back: its GPU memory is admitted
// first, then CRIU restores the tree into a fresh PID namespace (frozen, as
// it was dumped), the daemon re-adopts it as the same process, and the
// RAM thaw puts its memory back on the GPUs. A failed restore leaves it
// hibernated with the snapshot intact. A thaw that fails after the restore
// leaves it frozen in host RAM, where the restore held it to no budget: it
// is hibernated again where the RAM budget or its owner's share has no
// room for it.
func (d *Daemon) thawFromDisk(ctx context.Context, rec proctable.Record, opts thawOpts) (api.CheckpointResult, error) {
	res, err := d.restoreAndThaw(ctx, rec, opts)
	if err == nil {
		return res, nil
	}
	past, herr := d.undoPastRAM(rec.Key(), "it is hibernated again", func(rec proctable.Record) error {
		_, err := d.hibernateLocked(ctx, rec, hibernateOpts{why: "hibernated again: its thaw from disk failed, and host RAM had no room for it", freed: true})
		return err
	})
	switch {
	case past == nil:
		return res, err
	case herr != nil:
		return res, fmt.Errorf("%w; %v, but that hibernate failed: %v", err, past, herr)
	}
	return res, fmt.Errorf("%w; %v", err, past)
}

// restoreAndThaw is thawFromDisk but for what it does after a failed thaw.
func (d *Daemon) restoreAndThaw(ctx context.Context, rec proctable.Record, opts thawOpts) (api.CheckpointResult, error) {
	start := time.Now()
	what := fmt.Sprintf("%s %q", opts.op, rec.Name)
	if err := d.needCRIU(); err != nil {
		return api.CheckpointResult{}, err
	}
	if _, ok := d.snaps.Get(rec.Snapshot); !ok {
		return api.CheckpointResult{}, fmt.Errorf("%s: snapshot %s: %w", what, rec.Snapshot, checkpoint.ErrSnapshotNotFound)
	}
	_, remap := remapGPUs(rec.GPUs, opts.pairs)
	need := map[string]uint64{}
	for uuid, mib := range rec.Checkpoint.VRAM() {
		need[remap(uuid)] += mib
	}
	if err := d.sampler.refresh(ctx); err != nil {
		return api.CheckpointResult{}, fmt.Errorf("%s: sample GPUs: %w", what, err)
	}
	t := time.Now()
	release, err := d.admit(opts.waitCtx, what, rec, need, opts.wait)
	if err != nil {
		return api.CheckpointResult{}, err
	}
	defer release()
	admitMS := msSince(t)
	defer d.snaps.Foreground()() // through the last page read

	readBytes := d.chainBytes(rec.Snapshot)
	dir := d.snaps.Path(rec.Snapshot)
	opts.admitted = true
	var res api.CheckpointResult
	done := false
	if lazy := d.lazyThaw(rec); lazy || d.criu.Streams() {
		if res, rec, done, err = d.thawFromPageSource(ctx, rec, dir, opts, lazy); done && err != nil {
			return res, fmt.Errorf("%s: %w", what, err)
		}
	}
	if !done {
		t = time.Now()
		rec, err = d.restoreTree(ctx, rec, dir, false, false, opts.caller)
		if err != nil {
			return api.CheckpointResult{}, fmt.Errorf("%s: %w", what, err)
		}
		restoreMS := msSince(t)
		if res, err = d.thawLocked(ctx, rec, opts); err != nil {
			return res, err
		}
		res.MS["criu_restore"] = restoreMS
	}
	if err := d.snaps.Touch(rec.Snapshot, time.Now()); err != nil {
		d.log.Warn("snapshot last use", zap.String("snapshot", rec.Snapshot), zap.Error(err))
	}
	res.Snapshot = rec.Snapshot
	res.MS["admit"], res.MS["total"] = admitMS, msSince(start)
	d.metrics.checkpointDone(opRestore, time.Since(start), readBytes)
	return res, nil
}

// restoreTree restores the tree imaged in dir as rec (hibernated) and
// re-adopts it: new host pids, the same namespace pids, frozen and stopped.
// With lazy set, the restore is lazy: a lazy-pages server listening in dir
// serves its memory (see thawFromPageSource).
// It waits for the owner's CRIU turn (criuDump) as a hibernated process,
// and CRIU runs where criuPlaceFor says for caller (the cgroups of the
// owner's calling process). With inRAM set the tree is to stay in host RAM
// until thawed (a fork's copy): it is held to the RAM budget as a freeze is.
func (d *Daemon) restoreTree(ctx context.Context, rec proctable.Record, dir string, lazy, inRAM bool, caller logreader.Cgroups) (proctable.Record, error) {
	release, err := d.criuTurns.Take(ctx, rec.Owner.UID)
	if err != nil {
		return rec, fmt.Errorf("restore: %w", err)
	}
	defer release()
	place, err := d.criuPlaceFor(rec, caller)
	if err != nil {
		return rec, fmt.Errorf("restore: %w", err)
	}
	d.restoreWithTrees(rec, &place)
	restoring, err := d.holdInRAM(fmt.Sprintf("restore %q", rec.Name), rec.Key(), rec.Checkpoint.MiB(), inRAM, func() (proctable.Record, error) {
		return d.table.Update(rec.Key(), func(r *proctable.Record) error {
			if r.ID != rec.ID {
				return errReplaced
			}
			r.State, r.Error = api.StateRestoring, ""
			return nil
		})
	})
	if err != nil {
		return rec, err
	}
	rec = restoring
	defer d.snaps.Foreground()()
	if err := vetImages(rec, dir); err != nil {
		return rec, d.restoreFailed(rec, conflictf("%v", err))
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.CRIUTimeout)
	if len(place.dirs) > 0 { // the owner may have made them, and freeze them
		var stop context.CancelFunc
		rctx, stop = unlessFrozen(rctx, place.frozen)
		defer stop()
	}
	var note string
	var filesErr error // the restored tree's files refused (checkTreeFiles)
	ro := checkpoint.RestoreOpts{Dir: dir, Lazy: lazy, Cgroups: place.dirs, CPUs: place.cpus, OOMScoreAdj: rec.OOMScoreAdj, Restored: func(pid int) error {
		if err := place.goHome(pid); err != nil {
			return err
		}
		if filesErr = d.checkTreeFiles(rec, pid, dir); filesErr != nil {
			return filesErr
		}
		return d.carryIn(rec, pid, dir)
	}, MountsLeftOut: func(mountpoints []string) {
		note = "restored without the mounts at " + strings.Join(mountpoints, ", ") + ": gone from the host"
		d.log.Warn("restoring without mounts that are gone from the host", zap.String("name", rec.Name), zap.Strings("mountpoints", mountpoints))
	}}
	pid, err := d.criu.Restore(rctx, ro)
	cancel()
	switch {
	case errors.Is(filesErr, treefiles.ErrDenied):
		err = deniedf("%v", filesErr)
	case filesErr != nil: // what the restored tree holds, refused: no other restore of it either
		err = conflictf("%v", filesErr)
	case rec.Owner.UID != 0 && checkpoint.FileChanged(err):
		// CRIU's lines give the size and mode of what the path leads to
		// now, perhaps a file of root's its owner may not look at.
		d.log.Warn("restore refused by CRIU's check of a file", zap.String("name", rec.Name), zap.Error(err))
		err = conflictf("a file the tree held is not the one it held when it was dumped (CRIU found another size or mode at its path): a path it had was pointed elsewhere, or the file changed")
	}
	if err == nil {
		var out proctable.Record
		if out, err = d.adoptRestored(rec, pid, note); err == nil {
			return out, nil
		}
		killAndReap(pid)
	}
	return rec, d.restoreFailed(rec, err)
}

// restoreFailed records rec hibernated again after a failed restore, its
// snapshot kept, and returns the error to answer.
func (d *Daemon) restoreFailed(rec proctable.Record, err error) error {
	err = fmt.Errorf("restore: %w", err)
	if _, uerr := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		r.State, r.Error = api.StateHibernated, err.Error()
		return nil
	}); uerr != nil {
		d.log.Error("record failed restore", zap.String("name", rec.Name), zap.Error(uerr))
	}
	d.log.Warn("restore from disk failed; the snapshot is kept", zap.String("name", rec.Name), zap.String("snapshot", rec.Snapshot), zap.Error(err))
	return fmt.Errorf("%w; the process stays hibernated and snapshot %s is intact", err, rec.Snapshot)
}

// adoptRestored makes the tree CRIU restored at initPID the managed
// process rec: its pids are found again by namespace pid and its exit is
// watched. A note, when set, says what the restore changed.
func (d *Daemon) adoptRestored(rec proctable.Record, initPID int, note string) (proctable.Record, error) {
	initStart, err := procfs.StartTime(initPID)
	if err != nil {
		return rec, fmt.Errorf("restored init %d: %w", initPID, err)
	}
	procs, stopped, err := d.relocate(rec, initPID)
	if err != nil {
		return rec, err
	}
	cmdPID, _ := sandbox.FindCommand(initPID)
	cmdStart, _ := procfs.StartTime(cmdPID)
	pidfd, err := unix.PidfdOpen(initPID, unix.PIDFD_NONBLOCK)
	if err != nil {
		return rec, fmt.Errorf("restored init %d: %w", initPID, err)
	}
	// The tree rec was dumped from may still be dying (LeaveStopped): its
	// watcher leaves the cgroup this tree joins to it (removeDumpedCPU).
	d.procs.handover.Lock()
	defer d.procs.handover.Unlock()
	rt := d.procs.add(rec.ID, initPID, pidfd, true)
	cg := d.userCgroupOf(rec.Owner, rec.ID) // where the owner's cgroup is now
	out, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		r.State, r.BootID, r.Cgroup = api.StateFrozen, d.bootID, cg
		r.InitPID, r.InitStart, r.PID, r.PIDStart = initPID, initStart, cmdPID, cmdStart
		if r.StartedAt.IsZero() { // a fork's copy starts its life here
			r.StartedAt = time.Now()
		}
		r.Checkpoint.Procs, r.Checkpoint.Stopped = procs, stopped
		if note != "" {
			r.Note = note
		}
		return nil
	})
	if err != nil {
		d.procs.remove(rt)
		rt.pidfd.Close()
		return rec, err
	}
	d.placeTree(out, stopped)
	d.watch(out, rt)
	d.log.Info("restored from disk", zap.String("name", rec.Name), zap.Int("init_pid", initPID), zap.Int("pid", cmdPID))
	return out, nil
}

// relocate finds rec's checkpointed processes in the tree restored at
// initPID by their namespace pids and lists the whole (stopped) tree.
func (d *Daemon) relocate(rec proctable.Record, initPID int) ([]proctable.CheckpointProc, []proctable.ProcRef, error) {
	byNS, stopped, err := treeByNS(initPID)
	if err != nil {
		return nil, nil, err
	}
	procs := rec.Clone().Checkpoint.Procs
	for i, p := range procs {
		ref, ok := byNS[p.NSPID]
		if !ok {
			return nil, nil, fmt.Errorf("restored tree has no process %d in its namespace", p.NSPID)
		}
		procs[i].PID, procs[i].Start = ref.PID, ref.Start
	}
	return procs, stopped, nil
}

// carryIn hands the simulated CUDA state saved in dir to the new host pids
// of rec's checkpointed processes in the tree restored at initPID. It runs
// at CRIU's post-restore notification: a real process's CUDA state is in
// its restored memory from then on, before CRIU runs its plugins' device
// hooks, and so is a simulated one's.
func (d *Daemon) carryIn(rec proctable.Record, initPID int, dir string) error {
	carry, err := readCarry(dir)
	if err != nil {
		return fmt.Errorf("simulated CUDA state: %w", err)
	}
	if len(carry) == 0 {
		return nil
	}
	carrier, ok := d.gpus.(cudaStateCarrier)
	if !ok {
		return errors.New("the snapshot holds simulated CUDA state but the GPUs are not simulated")
	}
	byNS, _, err := treeByNS(initPID)
	if err != nil {
		return err
	}
	for _, p := range rec.Checkpoint.Procs {
		state, ok := carry[p.NSPID]
		if !ok {
			continue
		}
		ref, ok := byNS[p.NSPID]
		if !ok {
			return fmt.Errorf("restored tree has no process %d in its namespace", p.NSPID)
		}
		if err := carrier.CarryIn(ref.PID, ref.Start, state); err != nil {
			return fmt.Errorf("simulated CUDA state of pid %d: %w", ref.PID, err)
		}
	}
	return nil
}

// treeByNS maps the namespace pids of the tree at initPID to their host
// pids, and lists the tree.
func treeByNS(initPID int) (map[int]proctable.ProcRef, []proctable.ProcRef, error) {
	tree, err := procfs.ScanTree()
	if err != nil {
		return nil, nil, err
	}
	byNS := map[int]proctable.ProcRef{}
	var all []proctable.ProcRef
	for _, pid := range append([]int{initPID}, tree.Descendants(initPID)...) {
		ns, err := procfs.NSPid(pid)
		start, serr := procfs.StartTime(pid)
		if err != nil || serr != nil {
			continue
		}
		ref := proctable.ProcRef{PID: pid, Start: start}
		byNS[ns] = ref
		all = append(all, ref)
	}
	return byNS, all, nil
}

// killAndReap ends a restored tree the daemon could not take on.
func killAndReap(pid int) {
	_ = unix.Kill(pid, unix.SIGKILL)
	_, _ = unix.Wait4(pid, nil, 0, nil)
}
