package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// carryFile holds, in a snapshot, the CUDA state of simulated processes
// by namespace pid (see cudaStateCarrier).
const carryFile = "gpusched-carry.json"

// hibernateOpts are a hibernate's knobs.
type hibernateOpts struct {
	lockTimeout time.Duration
	full        bool   // no parent image
	why         string // "" when asked for; else the policy that evicted it, which waits for no CRIU turn
	quiet       bool   // a policy's try: the policy logs its failure
	freed       bool   // answer once the dumped tree's memory is freed (room for a freeze)
	// caller: the cgroups of the owner's process that asked (callerCgroups)
	caller logreader.Cgroups
}

// askedBy is who asked for a CRIU dump of a tree.
type askedBy struct {
	owner  bool              // its owner (or root for them), not the daemon itself: the owner's CRIU turn is taken
	caller logreader.Cgroups // the cgroups of the owner's calling process, where CRIU may run (criuPlaceFor)
}

// hibernate moves a running or frozen process to disk.
func (d *Daemon) hibernate(c *call) (any, error) {
	var p api.HibernateParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	r, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	if err := refuseMPS(r); err != nil {
		return nil, err
	}
	if err := d.needCRIU(); err != nil {
		return nil, err
	}
	unlock, err := d.ops.lock(c.ctx, r.Key())
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err := d.lookupAgain(p.Name, r.Key())
	if err != nil {
		return nil, err
	}
	o := hibernateOpts{lockTimeout: time.Duration(p.LockTimeout), full: p.Full, caller: callerCgroups(c, rec.Owner)}
	if o.lockTimeout == 0 {
		o.lockTimeout = d.cfg.LockTimeout
	}
	return d.hibernateLocked(context.WithoutCancel(c.ctx), rec, o)
}

// hibernateLocked freezes rec if it runs, then dumps its stopped tree to a
// new snapshot; the caller holds rec's lifecycle lock. A failed dump leaves
// the process frozen in RAM and no partial image; a tree whose memory is
// over the disk's room already is refused before it is frozen.
func (d *Daemon) hibernateLocked(ctx context.Context, rec proctable.Record, o hibernateOpts) (api.HibernateResult, error) {
	start := time.Now()
	ms := map[string]float64{}
	froze := rec.State == api.StateRunning
	switch rec.State {
	case api.StateRunning:
		// A tree that does not fit even before its GPU memory joins it is
		// refused as it runs, not frozen first.
		if err := d.diskRoom(fmt.Sprintf("hibernate %q", rec.Name), rec.Owner, dumpTotal(rec.InitPID)); err != nil {
			return api.HibernateResult{}, err
		}
		t := time.Now()
		if _, err := d.freezeLocked(ctx, rec, freezeOpts{lockTimeout: o.lockTimeout, stop: true, toDisk: true}); err != nil {
			return api.HibernateResult{}, fmt.Errorf("hibernate %q: %w", rec.Name, err)
		}
		ms["freeze"] = msSince(t)
		cur, ok := d.table.Get(rec.Key())
		if !ok || cur.ID != rec.ID {
			return api.HibernateResult{}, fmt.Errorf("hibernate %q: %w", rec.Name, errReplaced)
		}
		rec = cur
	case api.StateFrozen:
	case api.StateHibernated:
		return api.HibernateResult{}, conflictf("process %q is already hibernated (snapshot %s)", rec.Name, rec.Snapshot)
	default:
		return api.HibernateResult{}, conflictf("process %q is %s; only a running or frozen process can be hibernated", rec.Name, rec.State)
	}
	if len(rec.Checkpoint.Stopped) == 0 {
		// Frozen without SIGSTOP: the image must be of a still tree.
		stopped, err := d.stopTree(rec.InitPID, rec.Owner.UID)
		if err != nil {
			_ = continueTree(stopped) // as it was: nothing records them stopped
			return api.HibernateResult{}, fmt.Errorf("hibernate %q: stop tree: %w", rec.Name, err)
		}
		if rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
			r.Checkpoint.Stopped = stopped
			return nil
		}); err != nil {
			return api.HibernateResult{}, fmt.Errorf("hibernate %q: %w", rec.Name, err)
		}
	}
	res, err := d.dump(ctx, rec, o)
	if err != nil {
		if froze {
			err = d.thawBackPastRAM(ctx, rec.Key(), err)
		}
		return api.HibernateResult{}, err
	}
	for k, v := range res.MS {
		ms[k] = v
	}
	ms["total"] = msSince(start)
	res.MS = ms
	d.metrics.checkpointDone(opHibernate, time.Since(start), res.Written)
	return res, nil
}

// dump images rec's frozen, stopped tree into a new snapshot and records
// the process hibernated in it.
func (d *Daemon) dump(ctx context.Context, rec proctable.Record, o hibernateOpts) (api.HibernateResult, error) {
	defer d.snaps.Foreground()() // through the commit's sync
	img, err := d.dumpImage(ctx, rec, o)
	if err != nil {
		return api.HibernateResult{}, err
	}
	return d.finishDump(img, o)
}

// dumpedTree is a tree CRIU has imaged into a snapshot not yet committed,
// and left stopped.
type dumpedTree struct {
	rec    proctable.Record // hibernating
	rt     *procRuntime     // dumping is set: its end is the hibernate's
	meta   checkpoint.SnapshotMeta
	stats  checkpoint.PageStats
	dumpMS float64 // CRIU's dump, from the worker's start to its answer
}

// dumpImage records rec hibernating and has CRIU image its tree into a new
// snapshot, leaving the tree stopped. On failure, the image is gone and
// the process frozen in RAM again.
func (d *Daemon) dumpImage(ctx context.Context, rec proctable.Record, o hibernateOpts) (dumpedTree, error) {
	what := fmt.Sprintf("hibernate %q", rec.Name)
	rt := d.procs.get(rec.ID)
	if rt == nil {
		return dumpedTree{}, fmt.Errorf("%s: the daemon is not watching this process", what)
	}
	if err := d.refuseUnrestorableFiles(rec.Name, rec.Checkpoint.Stopped); err != nil {
		return dumpedTree{}, &frozenInRAM{fmt.Errorf("%s: %w", what, err)}
	}
	procs, carry, err := d.namespaced(rec)
	if err != nil {
		return dumpedTree{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := d.diskRoom(what, rec.Owner, dumpTotal(rec.InitPID)); err != nil {
		return dumpedTree{}, err
	}
	parent := d.parentFor(rec, o.full)
	meta := checkpoint.SnapshotMeta{
		ID: uuid.NewString(), Name: rec.Name, ProcessID: rec.ID, UID: rec.Owner.UID, User: rec.Owner.User,
		Parent: parent, GPUs: rec.GPUs, VRAM: rec.Checkpoint.VRAM(), CreatedAt: time.Now(),
	}
	meta.LastUsed = meta.CreatedAt
	dir, err := d.snaps.Create(meta.ID)
	if err != nil {
		return dumpedTree{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := writeCarry(dir, carry); err != nil {
		d.discard(meta.ID)
		return dumpedTree{}, fmt.Errorf("%s: %w", what, err)
	}
	rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Error = api.StateHibernating, ""
		r.Checkpoint.Procs = procs
		r.Snapshot = meta.ID // pending: settled at boot if the daemon dies now
		return nil
	})
	if err != nil {
		d.discard(meta.ID)
		return dumpedTree{}, fmt.Errorf("%s: %w", what, err)
	}

	t := time.Now()
	rt.dumping.Store(true)
	stats, err := d.criuDump(ctx, rec, dir, parent, checkpoint.LeaveStopped, askedBy{owner: o.why == "", caller: o.caller})
	dumpMS := msSince(t)
	if err != nil {
		rt.dumping.Store(false)
		return dumpedTree{}, d.dumpFailed(rec, rt, meta.ID, parent, fmt.Errorf("%s: %w", what, err), o.quiet)
	}
	return dumpedTree{rec: rec, rt: rt, meta: meta, stats: stats, dumpMS: dumpMS}, nil
}

// finishDump commits a dumped tree's snapshot, ends the tree and records
// the process hibernated in the snapshot.
func (d *Daemon) finishDump(img dumpedTree, o hibernateOpts) (api.HibernateResult, error) {
	rec, rt, meta := img.rec, img.rt, img.meta
	ms := map[string]float64{"dump": img.dumpMS}
	what := fmt.Sprintf("hibernate %q", rec.Name)
	meta.Pages, meta.Reused = img.stats.Pages, img.stats.Reused
	t := time.Now()
	meta, err := d.snaps.Commit(meta)
	ms["sync"] = msSince(t)
	if err != nil { // the tree is still there, stopped: frozen in RAM again
		rt.dumping.Store(false)
		return api.HibernateResult{}, d.dumpFailed(rec, rt, img.meta.ID, img.meta.Parent, fmt.Errorf("%s: %w", what, err), o.quiet)
	}
	// The image is durable: end the stopped tree, and let it die (its
	// memory torn down) while the hibernate answers. Its watcher forgets it
	// (dumping is set) and leaves its cgroup to a restore that adopted the
	// next tree meanwhile (removeDumpedCPU); a restart keeps the complete
	// image (settleHibernating).
	if err := rt.signal(unix.SIGKILL); err != nil {
		d.log.Error("kill a dumped tree", zap.String("name", rec.Name), zap.Int("init_pid", rec.InitPID), zap.Error(err))
	}
	rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Snapshot = api.StateHibernated, meta.ID
		r.InitPID, r.InitStart, r.PID, r.PIDStart = 0, 0, 0, 0
		r.Checkpoint.Stopped = nil
		r.Note = o.why
		return nil
	})
	if err != nil {
		return api.HibernateResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if meta.Parent == "" {
		d.dropOlder(rec.ID, meta.ID)
	}
	if o.freed {
		d.awaitEnd(rt, rec.Name)
	}
	d.sampler.kick()
	d.log.Info("hibernated", zap.String("name", rec.Name), zap.String("snapshot", meta.ID), zap.String("parent", meta.Parent),
		zap.Uint64("bytes", meta.Bytes), zap.Uint64("pages", meta.Pages), zap.Uint64("reused", meta.Reused), zap.String("why", o.why))
	return api.HibernateResult{Name: rec.Name, State: rec.State, Snapshot: meta.ID, Parent: meta.Parent, Bytes: meta.Bytes,
		Written: meta.Written, Pages: meta.Pages, Reused: meta.Reused, GPUBytes: rec.Checkpoint.MiB() << 20, MS: ms}, nil
}

// criuDump runs one CRIU dump of rec's tree into dir, as the tree's owner,
// with the pages through a page server process that leaves pages
// unchanged since parent in it. Asked for by its owner, it waits for the
// owner's CRIU turn first: a user's dumps and restores run one at a time
// (criuTurns), so that one user's loops on many processes do not run as
// many at once; and CRIU and the page server run where criuPlaceFor says,
// their CPU weighing against the user's. The daemon's own dumps go without
// either (an eviction makes room for another's freeze, a ttl policy runs
// in the loop that serves every user's): they must not wait behind or on
// the owner.
func (d *Daemon) criuDump(ctx context.Context, rec proctable.Record, dir, parent string, leave checkpoint.Leave, by askedBy) (checkpoint.PageStats, error) {
	var place criuPlace
	if by.owner {
		release, err := d.criuTurns.Take(ctx, rec.Owner.UID)
		if err != nil {
			return checkpoint.PageStats{}, err
		}
		defer release()
		if place, err = d.criuPlaceFor(rec, by.caller); err != nil {
			return checkpoint.PageStats{}, err
		}
	}
	parentDir := ""
	if parent != "" {
		parentDir = d.snaps.Path(parent)
	}
	defer d.snaps.Foreground()()
	ctx, cancel := context.WithTimeout(ctx, d.cfg.CRIUTimeout)
	defer cancel()
	if rec.Cgroup != "" || len(place.dirs) > 0 { // the owner may freeze a cgroup of theirs the tree or CRIU is in
		frozen := func() string {
			if dir := place.frozen(); dir != "" || rec.Cgroup == "" {
				return dir
			}
			return treeFrozen(rec.InitPID)()
		}
		// Not started on a frozen tree: a CRIU stopped while it holds the
		// tree seized may leave its parasite's code and registers in it
		// (the restored copy of such a tree died of SIGTRAP at 0x400003).
		if err := frozenError(frozen()); err != nil {
			return checkpoint.PageStats{}, fmt.Errorf("criu dump of pid %d: %w", rec.InitPID, err)
		}
		var stop context.CancelFunc
		ctx, stop = unlessFrozen(ctx, frozen)
		defer stop()
	}
	// The daemon's own dumps are not started on a tree CRIU cannot seize:
	// another user's freeze, or every user's policies, would wait out
	// CRIU's own timeout on it, at every try. The owner's own may wait.
	if !by.owner {
		if err := stuckError(rec.InitPID, stuckGrace); err != nil {
			return checkpoint.PageStats{}, fmt.Errorf("criu dump of pid %d: %w", rec.InitPID, err)
		}
	}
	pso := checkpoint.PageServerOptions{Path: d.helperPath, Dir: dir, Parent: parentDir, Cgroups: place.dirs, CPUs: place.cpus}
	// Measured again now, after the owner's turn (the tree may have grown
	// since the hibernate was admitted), and counted in flight until the
	// dump ends: dumps at once do not find the same room.
	pages, files := dumpBytes(rec.InitPID)
	done, err := d.snaps.Admit(rec.Owner.UID, pages+files, func() error {
		return d.diskRoom(fmt.Sprintf("the dump of %q", rec.Name), rec.Owner, pages+files)
	})
	if err != nil {
		return checkpoint.PageStats{}, err
	}
	defer done()
	if room, ok := d.dumpRoom(rec.Owner.UID); ok {
		// What is left with this dump counted, and its pages: its deleted
		// files CRIU writes beside the page server.
		pso.Limit = max(1, room+pages)
	}
	ps, err := checkpoint.StartPageServerProcess(ctx, pso)
	if err != nil {
		return checkpoint.PageStats{}, err
	}
	defer ps.Close()
	var as *checkpoint.Owner
	if rec.Owner.UID != 0 {
		as = &checkpoint.Owner{UID: rec.Owner.UID, GID: rec.Owner.GID}
	}
	clearProcMount(d.sandboxHome(rec.ID))
	err = d.criu.Dump(ctx, checkpoint.DumpOpts{Dir: dir, PID: rec.InitPID, Leave: leave, As: as,
		PageServer: ps.TakeCRIUEnd(), Cgroups: place.dirs, CPUs: place.cpus,
		Dumped: func() error {
			if err := d.takeTreeFiles(rec, dir); err != nil {
				return conflictf("%v", err) // the tree's doing, not the daemon's
			}
			return nil
		}})
	if err != nil {
		ps.Close() // CRIU may never have connected
	}
	stats, perr := ps.Wait(ctx)
	switch {
	case errors.Is(perr, checkpoint.ErrNoSpace) && err != nil:
		// CRIU only saw its connection drop; the page server knows why.
		return stats, fmt.Errorf("%w (%v)", perr, err)
	case err == nil:
		err = perr
	}
	return stats, err
}

// dumpFailed settles a hibernate whose dump or commit failed: the image
// goes, and the process is frozen again (CRIU leaves a tree it failed to
// dump as it was, and a dumped tree is ended only once committed), or
// exited if it ended meanwhile. quiet lowers its log line to debug.
func (d *Daemon) dumpFailed(rec proctable.Record, rt *procRuntime, id, parent string, cause error, quiet bool) error {
	d.discard(id)
	select {
	case <-rt.exited:
		d.recordExit(rec, rt)
		return fmt.Errorf("%w; the process ended during the dump", cause)
	default:
	}
	_, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Snapshot, r.Error = api.StateFrozen, parent, cause.Error()
		return nil
	})
	d.log.Log(failLevel(quiet), "hibernate failed", zap.String("name", rec.Name), zap.Error(cause))
	if err != nil {
		return fmt.Errorf("%w (and recording it failed: %v)", cause, err)
	}
	return &frozenInRAM{cause}
}

// frozenInRAM is the error of a hibernate whose dump failed and left the
// process frozen in RAM.
type frozenInRAM struct{ cause error }

func (e *frozenInRAM) Error() string { return e.cause.Error() + "; the process stays frozen in RAM" }
func (e *frozenInRAM) Unwrap() error { return e.cause }

// thawBackPastRAM settles a process that a hibernate froze, as it ran, and
// then failed to dump (err): it stays frozen in RAM only where the RAM
// budget and its owner's share of it have room for it, as a freeze is held
// to (the hibernate's own freeze, on its way to disk, was not); otherwise
// it is thawed back to running, as it was.
func (d *Daemon) thawBackPastRAM(ctx context.Context, key proctable.Key, err error) error {
	var left *frozenInRAM
	if !errors.As(err, &left) {
		return err
	}
	past, terr := d.undoPastRAM(key, "it is thawed back to running", func(rec proctable.Record) error {
		_, err := d.thawLocked(ctx, rec, thawOpts{op: "thaw", waitCtx: ctx})
		return err
	})
	switch {
	case past == nil:
		return err
	case terr != nil:
		return fmt.Errorf("%w; %v, but that thaw failed: %v", err, past, terr)
	}
	return fmt.Errorf("%w; %v", left.cause, past)
}

// namespaced returns rec's checkpointed processes with their namespace
// pids, and the CUDA state a simulated backend keeps outside them.
func (d *Daemon) namespaced(rec proctable.Record) ([]proctable.CheckpointProc, map[int]json.RawMessage, error) {
	procs := rec.Clone().Checkpoint.Procs
	carry := map[int]json.RawMessage{}
	carrier, _ := d.gpus.(cudaStateCarrier)
	for i, p := range procs {
		if !procfs.Alive(p.PID, p.Start) {
			return nil, nil, fmt.Errorf("checkpointed pid %d is gone", p.PID)
		}
		ns, err := procfs.NSPid(p.PID)
		if err != nil {
			return nil, nil, err
		}
		procs[i].NSPID = ns
		if carrier != nil {
			state, err := carrier.CarryOut(p.PID)
			if err != nil {
				return nil, nil, fmt.Errorf("simulated CUDA state of pid %d: %w", p.PID, err)
			}
			carry[ns] = state
		}
	}
	return procs, carry, nil
}

func writeCarry(dir string, carry map[int]json.RawMessage) error {
	if len(carry) == 0 {
		return nil
	}
	b, err := json.Marshal(carry)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, carryFile), b, 0o600)
}

func readCarry(dir string) (map[int]json.RawMessage, error) {
	b, err := os.ReadFile(filepath.Join(dir, carryFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var carry map[int]json.RawMessage
	return carry, json.Unmarshal(b, &carry)
}

// parentFor picks the parent of rec's next dump: the snapshot it was last
// restored from, unless a full image is asked for or the chain is long.
func (d *Daemon) parentFor(rec proctable.Record, full bool) string {
	if full || rec.Snapshot == "" || d.cfg.MaxChain == 0 {
		return ""
	}
	if chain := d.snaps.Chain(rec.Snapshot); len(chain) == 0 || len(chain) > d.cfg.MaxChain {
		return ""
	}
	return rec.Snapshot
}

// dropOlder retires a process's snapshots other than keep (all of them
// for ""), once a full image or the process's end makes them unnecessary:
// the caller answers without waiting for their removal.
func (d *Daemon) dropOlder(processID, keep string) {
	snaps := d.snaps.List()
	for i := len(snaps) - 1; i >= 0; i-- { // children before parents
		if m := snaps[i]; m.ProcessID == processID && m.ID != keep {
			d.retire(m.ID)
		}
	}
}

// retire deletes a snapshot nothing needs any more in the background
// (Snapshots.Retire): the caller answers without waiting for it.
func (d *Daemon) retire(id string) {
	if err := d.snaps.Retire(id); err != nil {
		d.log.Warn("delete snapshot", zap.String("snapshot", id), zap.Error(err))
	}
}

func (d *Daemon) discard(id string) {
	if err := d.snaps.Discard(id); err != nil {
		d.log.Warn("delete snapshot", zap.String("snapshot", id), zap.Error(err))
	}
}
