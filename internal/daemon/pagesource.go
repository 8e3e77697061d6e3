package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/lazypages"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// lazyThaw reports whether rec is thawed from disk lazily: when asked for
// and possible, and when its CUDA restore needs nothing from the tree's
// memory read from outside it. A page still on disk cannot be read from
// outside the process (the kernel's remote access, as /proc/P/environ,
// cmdline or mem, fails on a missing page of a userfaultfd range instead of
// waiting for it), and cuda-checkpoint's stand-in reads the target's
// environment to find it; the simulated driver carries the CUDA state
// itself (carryIn), and a tree with no CUDA process needs no restore.
func (d *Daemon) lazyThaw(rec proctable.Record) bool {
	return d.criu.Lazy() && (len(checkpointed(rec)) == 0 || d.driver != nil && d.driver.Caps().Kind == config.DriverSim)
}

// thawFromPageSource is thawFromDisk's restore and thaw with our
// lazy-pages server (internal/lazypages) listening on the snapshot's
// images: the tree is restored with its anonymous memory left to the
// server. Lazily (--lazy-restore, lazy set) it is thawed at once and the
// thaw answers once every page is back, with the time the process ran
// again (ms "running") beside the time all its memory was in
// ("all_memory"). Streamed (--stream-restore) the restored tree stays
// stopped while the server brings every page in, and is thawed after
// that: the thaw is eager, its pages read with O_DIRECT straight into the
// process instead of through the page cache by CRIU. The snapshot stays as
// it is meanwhile, as always. The server runs where the restore's CRIU
// does (criuPlaceFor), so that a user's cgroup holds what it spends; one
// the user freezes fails the transfer at once. When the restore cannot
// start, or the page source fails before every page is in (the process may
// have read zeros where its pages were missing), the tree is killed and
// rec is returned hibernated as it was, with done false: the caller
// restores eagerly.
func (d *Daemon) thawFromPageSource(ctx context.Context, rec proctable.Record, dir string, opts thawOpts, lazy bool) (res api.CheckpointResult, out proctable.Record, done bool, err error) {
	saved := rec.Clone()
	t := time.Now()
	place, err := d.criuPlaceFor(rec, opts.caller)
	if err != nil {
		return res, rec, false, nil // restoreTree says why
	}
	src, err := lazypages.Start(lazypages.Options{Path: d.helperPath, Dir: dir, ReadAhead: !lazy, Cgroups: place.dirs, CPUs: place.cpus})
	if err != nil {
		d.log.Warn("lazy-pages server did not start; restoring with CRIU's reads", zap.String("name", rec.Name), zap.Error(err))
		return res, rec, false, nil
	}
	if rec, err = d.restoreTree(ctx, rec, dir, true, false, opts.caller); err != nil {
		src.Close()
		cur, ok := d.table.Get(rec.Key())
		if refused := errors.Is(err, ErrConflict) || errors.Is(err, ErrPermission); refused || !ok || cur.ID != saved.ID {
			// A refusal of what the tree holds is the answer: another
			// restore of the same images would only meet it again, or
			// pass where the owner changed paths meanwhile.
			return res, cur, true, err
		}
		d.log.Warn("restore with our page source failed; restoring with CRIU's reads", zap.String("name", rec.Name), zap.Error(err))
		return res, cur, false, err
	}
	restoreMS := msSince(t)
	// Until every page is in, an end of the tree (one that met a page the
	// failed source left zero) is not the process's: its snapshot stays.
	rt := d.procs.get(rec.ID)
	if rt == nil { // it was killed between its adoption and here: its exit is recorded
		src.Close()
		return res, rec, true, fmt.Errorf("the lazily restored tree of %q ended before it ran", rec.Name)
	}
	rt.dumping.Store(true)
	var runningMS float64
	if lazy {
		res, err = d.thawLocked(ctx, rec, opts)
		runningMS = msSince(t)
	}
	src.Running() // the server's transfer starts
	wctx, cancel := context.WithTimeout(ctx, d.cfg.CRIUTimeout)
	if len(place.dirs) > 0 { // the owner may freeze the server there
		var stop context.CancelFunc
		wctx, stop = unlessFrozen(wctx, place.frozen)
		defer stop()
	}
	werr := src.Wait(wctx)
	cancel()
	if cerr := src.Close(); cerr != nil {
		d.log.Warn("lazy-pages socket", zap.Error(cerr))
	}
	if werr == nil {
		if !rt.dumping.CompareAndSwap(true, false) {
			// The watcher took its end as ours; it ended with all its
			// memory in, so it is the process's exit.
			<-rt.exited
			d.recordExit(rec, rt)
			if !lazy {
				return res, rec, true, fmt.Errorf("the restored tree of %q ended before it was thawed", rec.Name)
			}
		}
		allMS := msSince(t)
		if !lazy {
			res, err = d.thawLocked(ctx, rec, opts)
		}
		if err == nil {
			res.MS["criu_restore"], res.MS["all_memory"] = restoreMS, allMS
			res.MS["lazy_pages_start"] = float64(src.Startup.Microseconds()) / 1000
			if lazy {
				res.MS["running"] = runningMS
			}
		}
		return res, rec, true, err
	}
	d.log.Warn("restore: our page source failed; restoring with CRIU's reads", zap.String("name", rec.Name), zap.Error(werr))
	if rec, err = d.dropLazyTree(saved, werr); err != nil {
		return res, rec, true, err
	}
	return res, rec, false, nil
}

// dropLazyTree kills the tree of a lazy restore whose page source failed
// and puts back saved, the hibernated record it was restored from; its
// end is not the process's (procRuntime.dumping is set).
func (d *Daemon) dropLazyTree(saved proctable.Record, why error) (proctable.Record, error) {
	cur, ok := d.table.Get(saved.Key())
	if !ok || cur.ID != saved.ID {
		return saved, fmt.Errorf("lazy restore: %w", errReplaced)
	}
	if rt := d.procs.get(saved.ID); rt != nil { // else it ended already
		_ = unix.Kill(cur.InitPID, unix.SIGKILL)
		select {
		case <-rt.exited:
		case <-time.After(reapTimeout):
			d.log.Warn("lazily restored tree still present", zap.String("name", saved.Name), zap.Int("init_pid", cur.InitPID))
		}
	}
	// An init that saw its command die on a missing page wrote its exit
	// report; the status file was empty at the dump, and CRIU refuses a
	// file whose size changed (criu/files-reg.c, "has bad size").
	if err := os.Truncate(saved.StatusPath, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return saved, fmt.Errorf("lazy restore: status file: %w", err)
	}
	return d.table.Update(saved.Key(), func(r *proctable.Record) error {
		if r.ID != saved.ID {
			return errReplaced
		}
		r.State, r.Checkpoint, r.Error = api.StateHibernated, saved.Checkpoint, fmt.Sprintf("lazy restore: %v", why)
		r.InitPID, r.InitStart, r.PID, r.PIDStart = 0, 0, 0, 0
		return nil
	})
}
