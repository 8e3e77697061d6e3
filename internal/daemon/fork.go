package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/logfile"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// maxCopies bounds one fork.
const maxCopies = 64

// fork dumps a process, leaving it as it was, and restores independent
// copies NAME-1..NAME-N from the one image, each in its own PID namespace
// with its own log, placed on its GPU by UUID map.
func (d *Daemon) fork(c *call) (any, error) {
	var p api.ForkParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	src, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	if err := refuseMPS(src); err != nil {
		return nil, err
	}
	if p.Copies < 1 || p.Copies > maxCopies {
		return nil, invalidf("fork %q: copies %d is outside 1..%d", p.Name, p.Copies, maxCopies)
	}
	names := make([]string, p.Copies)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%d", src.Name, i+1)
		if err := api.ValidateName(names[i]); err != nil {
			return nil, invalidf("fork %q: copy name: %v", p.Name, err)
		}
		if old, ok := d.table.Get(proctable.Key{UID: src.Owner.UID, Name: names[i]}); ok && old.Live() {
			return nil, api.Errorf(api.CodeExists, "fork %q: process %q already exists (%s)", p.Name, names[i], old.State)
		}
	}
	if err := d.checkCopies(c.actor, fmt.Sprintf("fork %q", p.Name), p.Copies); err != nil {
		return nil, err
	}
	targets, err := d.forkTargets(p, src)
	if err != nil {
		return nil, err
	}
	if err := d.needCRIU(); err != nil {
		return nil, err
	}
	ctx := context.WithoutCancel(c.ctx)
	unlock, err := d.ops.lock(c.ctx, src.Key())
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, n := range names {
		u, err := d.ops.lock(c.ctx, proctable.Key{UID: src.Owner.UID, Name: n})
		if err != nil {
			return nil, err
		}
		defer u()
	}
	if src, err = d.lookupAgain(p.Name, src.Key()); err != nil {
		return nil, err
	}
	start := time.Now()
	img, err := d.forkImage(ctx, src, callerCgroups(c, src.Owner))
	if err != nil {
		return nil, err
	}
	defer d.retire(img.ID) // once every copy is restored
	res := api.ForkResult{Name: p.Name, Copies: []api.Process{}, Bytes: img.Bytes, MS: map[string]float64{"dump": img.dumpMS}}
	var errs []error
	for i, name := range names {
		t := time.Now()
		cp, err := d.restoreCopy(ctx, c, src, img, name, i+1, targets[i], time.Duration(p.Timeout))
		res.MS[name] = msSince(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res.Copies = append(res.Copies, cp)
	}
	res.MS["total"] = msSince(start)
	if len(errs) > 0 {
		return nil, fmt.Errorf("fork %q: %d of %d copies failed: %w", p.Name, len(errs), p.Copies, errors.Join(errs...))
	}
	return res, nil
}

// forkTargets resolves where each copy goes: GPU i for copy i, of the
// source's chip type, or "" (the source's GPUs).
func (d *Daemon) forkTargets(p api.ForkParams, src proctable.Record) ([]string, error) {
	out := make([]string, p.Copies)
	if len(p.GPUs) == 0 {
		return out, nil
	}
	if len(p.GPUs) != p.Copies {
		return nil, invalidf("fork %q: %s for %s: give one per copy", p.Name, api.Plural(len(p.GPUs), "GPU", "GPUs"), api.Plural(p.Copies, "copy", "copies"))
	}
	if len(src.GPUs) != 1 {
		return nil, invalidf("fork %q: gpus places copies of a process on one GPU; %q has %d", p.Name, p.Name, len(src.GPUs))
	}
	for i, ref := range p.GPUs {
		what := fmt.Sprintf("fork %q", p.Name)
		uuids, err := d.usableGPUs(what, &ref, nil)
		if err != nil {
			return nil, err
		}
		if err := d.sameChips(what, []checkpoint.GPUPair{{Old: src.GPUs[0], New: uuids[0]}}); err != nil {
			return nil, err
		}
		out[i] = uuids[0]
	}
	return out, nil
}

// forkSource is a fork's image of the source tree.
type forkSource struct {
	checkpoint.SnapshotMeta
	dir    string
	procs  []proctable.CheckpointProc
	dumpMS float64
}

// forkImage dumps src leaving it as it was: a running source is frozen for
// the dump (its GPU memory must be in host memory to be imaged) and thawed
// after.
func (d *Daemon) forkImage(ctx context.Context, src proctable.Record, caller logreader.Cgroups) (forkSource, error) {
	what := fmt.Sprintf("fork %q", src.Name)
	running := src.State == api.StateRunning
	switch src.State {
	case api.StateRunning:
		if _, err := d.freezeLocked(ctx, src, freezeOpts{lockTimeout: d.cfg.LockTimeout, stop: true, toDisk: true}); err != nil {
			return forkSource{}, fmt.Errorf("%s: %w", what, err)
		}
		src, _ = d.table.Get(src.Key())
	case api.StateFrozen:
	default:
		return forkSource{}, conflictf("process %q is %s; only a running or frozen process can be forked", src.Name, src.State)
	}
	img, err := d.dumpForFork(ctx, src, caller)
	if running {
		cur, _ := d.table.Get(src.Key())
		if _, terr := d.thawLocked(ctx, cur, thawOpts{op: "thaw", waitCtx: ctx}); terr != nil {
			d.log.Warn("source of a fork stays frozen", zap.String("name", src.Name), zap.Error(terr))
		}
	}
	if err != nil {
		return forkSource{}, fmt.Errorf("%s: %w", what, err)
	}
	return img, nil
}

func (d *Daemon) dumpForFork(ctx context.Context, src proctable.Record, caller logreader.Cgroups) (forkSource, error) {
	stopped := src.Checkpoint.Stopped
	if len(stopped) == 0 {
		var err error
		if stopped, err = d.stopTree(src.InitPID, src.Owner.UID); err != nil {
			_ = continueTree(stopped) // as it was: nothing records them stopped
			return forkSource{}, err
		}
		defer func() { _ = continueTree(stopped) }()
	}
	if err := d.refuseUnrestorableFiles(src.Name, stopped); err != nil {
		return forkSource{}, err
	}
	procs, carry, err := d.namespaced(src)
	if err != nil {
		return forkSource{}, err
	}
	if err := d.diskRoom("the fork image", src.Owner, dumpTotal(src.InitPID)); err != nil {
		return forkSource{}, err
	}
	img := forkSource{SnapshotMeta: checkpoint.SnapshotMeta{ID: uuid.NewString()}, procs: procs}
	if img.dir, err = d.snaps.Create(img.ID); err != nil {
		return forkSource{}, err
	}
	t := time.Now()
	err = writeCarry(img.dir, carry)
	if err == nil {
		_, err = d.criuDump(ctx, src, img.dir, "", checkpoint.LeaveRunning, askedBy{owner: true, caller: caller})
	}
	img.dumpMS = msSince(t)
	if err != nil {
		d.discard(img.ID)
		return forkSource{}, fmt.Errorf("dump: %w", err)
	}
	img.Bytes, _ = checkpoint.DirBytes(img.dir)
	return img, nil
}

// restoreCopy restores copy n of the fork image as a new process name,
// then thaws it onto target (or the source's GPUs).
func (d *Daemon) restoreCopy(ctx context.Context, c *call, src proctable.Record, img forkSource, name string, n int, target string, wait time.Duration) (api.Process, error) {
	cmd, err := d.table.Command(src)
	if err != nil {
		return api.Process{}, fmt.Errorf("copy %q: %w", name, err)
	}
	rec := proctable.Record{
		ID: uuid.NewString(), Name: name, Owner: src.Owner, Cmd: cmd, Dir: src.Dir, GPUs: src.GPUs,
		Nice: src.Nice, Rlimits: src.Rlimits, OOMScoreAdj: src.OOMScoreAdj, CPUs: src.CPUs, Policy: src.Policy, State: api.StateHibernated, BootID: d.bootID, CreatedAt: time.Now(),
		Checkpoint: &proctable.Checkpoint{Procs: img.procs, FrozenAt: time.Now()},
	}
	rec.LogPath = d.logPath(rec.Key())
	rec.StatusPath = filepath.Join(d.statusDir(), rec.ID)
	var pairs []checkpoint.GPUPair
	if target != "" && target != src.GPUs[0] {
		pairs = []checkpoint.GPUPair{{Old: src.GPUs[0], New: target}}
	}
	if err := d.claimName(rec.Key()); err != nil {
		return api.Process{}, fmt.Errorf("copy %q: %w", name, err)
	}
	d.removeLogs(rec.LogPath)
	if err := touch(rec.LogPath, rec.StatusPath); err != nil {
		return api.Process{}, fmt.Errorf("copy %q: %w", name, err)
	}
	dir := filepath.Join(img.dir, fmt.Sprintf("copy-%d", n))
	home, err := d.makeSandboxHome(rec.ID)
	if err == nil {
		err = checkpoint.CloneImage(img.dir, dir, map[string]string{src.LogPath: rec.LogPath, src.StatusPath: rec.StatusPath,
			d.sandboxHome(src.ID): home})
	}
	orig := rec // what to clean up if it fails
	if err == nil {
		rec, err = d.table.CreateWithin(rec, d.admitProc(c.actor))
	}
	if err == nil { // it stays in host RAM where its GPU has no room
		err = d.makeRoom(ctx, fmt.Sprintf("fork copy %q", name), rec.Checkpoint.MiB(), rec.Key())
	}
	if err == nil {
		rec, err = d.restoreTree(ctx, rec, dir, false, true, callerCgroups(c, src.Owner))
	}
	if err == nil {
		_, err = d.thawLocked(ctx, rec, thawOpts{op: "fork", pairs: pairs, wait: wait, waitCtx: c.ctx})
		if err != nil {
			d.log.Warn("fork copy restored but not thawed", zap.String("name", name), zap.Error(err))
			err = nil // restored; its state and error say why it is not running
		}
	}
	if err != nil {
		cur, ok := d.table.Get(orig.Key())
		recorded := ok && cur.ID == orig.ID
		if recorded && cur.State == api.StateHibernated {
			_, rerr := d.table.Remove(orig.Key(), nil)
			recorded = rerr != nil
		}
		if !recorded { // never recorded (refused), or forgotten: its files go too
			os.Remove(orig.StatusPath)
			d.removeLogs(orig.LogPath)
			d.removeSandboxHome(orig.ID)
		}
		return api.Process{}, fmt.Errorf("copy %q: %w", name, err)
	}
	cur, _ := d.table.Get(rec.Key())
	return toAPI(cur, d.gpuView()), nil
}

// touch creates empty files (a log opened append-only, a status file).
func touch(paths ...string) error {
	for _, p := range paths {
		f, err := logfile.OpenAppend(p)
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}
