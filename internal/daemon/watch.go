package daemon

import (
	"errors"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/pkg/api"
)

// watch records rec's exit when its init ends. It runs until then or until
// shutdown closes the pidfd. The end of a tree CRIU dumped is left to the
// hibernate that dumped it.
func (d *Daemon) watch(rec proctable.Record, rt *procRuntime) {
	d.procs.wg.Add(1)
	go func() {
		defer d.procs.wg.Done()
		if !waitExit(rt) {
			return
		}
		charge := d.bulk.Charge(rec.Owner.UID)
		defer charge()
		rt.exit = d.exitOf(rec, rt)
		if rt.dumping.Swap(false) { // claimed: see thawFromPageSource
			d.removeDumpedCPU(rec, rt)
			d.procs.remove(rt)
			close(rt.exited) // before the pidfd closes: see procRuntime.signal
			rt.pidfd.Close()
			return
		}
		d.removeCPU(rec)
		d.recordExit(rec, rt)
	}()
}

// recordExit marks rec exited as rt says it ended and forgets its runtime,
// snapshots and supervisor directory.
func (d *Daemon) recordExit(rec proctable.Record, rt *procRuntime) {
	exit := rt.exit
	d.removeSandboxHome(rec.ID) // before the exit is visible: nothing runs in it any more
	d.keepExit(rec, exit, d.log.With(zap.String("name", rec.Name)))
	d.dropSnapshots(rec.ID)
	d.procs.remove(rt)
	select {
	case <-rt.exited:
	default:
		close(rt.exited) // before the pidfd closes: see procRuntime.signal
	}
	rt.pidfd.Close()
	d.sampler.kick()
	d.log.Info("process exited", zap.String("name", rec.Name), zap.Int("init_pid", rec.InitPID), zap.Any("exit", exit))
}

// keepExit records rec exited with exit, now, or, where the state
// directory refuses it (a full disk), as soon as it takes it (retryExit).
func (d *Daemon) keepExit(rec proctable.Record, exit api.Exit, log *zap.Logger) {
	at := time.Now()
	if err := d.storeExit(rec, exit, at); err != nil && !settled(err) {
		log.Error("record exit; trying again until the state directory takes it", zap.Error(err))
		go d.retryExit(rec, exit, at, log)
	}
}

// storeExit records rec exited, with exit, at at.
func (d *Daemon) storeExit(rec proctable.Record, exit api.Exit, at time.Time) error {
	_, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Exit, r.ExitedAt = api.StateExited, &exit, at
		return nil
	})
	return err
}

// settled reports whether storeExit's err means no later try can record
// the exit: the record replaced, removed, or no longer one that can exit.
func settled(err error) bool {
	var te *proctable.TransitionError
	return errors.Is(err, errReplaced) || errors.Is(err, proctable.ErrNotFound) || errors.As(err, &te)
}

// Spacing of retryExit's tries.
const exitRetryMin, exitRetryMax = 250 * time.Millisecond, 5 * time.Second

// retryExit tries storeExit again, twice as long apart each time up to
// exitRetryMax, until it succeeds or cannot, or the daemon stops: an exit
// the state directory refused (a full disk) would otherwise leave the
// process running in every answer, not waitable, not killable, its name
// and its owner's process slot taken, until a restart (a red-team pass
// showed it, 2026-11-29). Until then the record says running.
func (d *Daemon) retryExit(rec proctable.Record, exit api.Exit, at time.Time, log *zap.Logger) {
	for wait := exitRetryMin; !d.stopping.Load(); wait = min(2*wait, exitRetryMax) {
		time.Sleep(wait)
		if err := d.storeExit(rec, exit, at); err == nil || settled(err) {
			log.Info("exit recorded at last", zap.NamedError("settled", err))
			return
		}
	}
}

// awaitEnd waits until rt's watcher has seen its killed tree end, at most
// reapTimeout.
func (d *Daemon) awaitEnd(rt *procRuntime, name string) {
	select {
	case <-rt.exited:
	case <-time.After(reapTimeout):
		d.log.Warn("killed tree still present", zap.String("name", name), zap.Int("init_pid", rt.initPID), zap.Duration("after", reapTimeout))
	}
}

var errReplaced = errors.New("record was replaced")

// exitOf works out how a tree ended: from the init's exit report when it
// wrote one, else from its wait status when it is our child, else from
// what this daemon did to it.
func (d *Daemon) exitOf(rec proctable.Record, rt *procRuntime) api.Exit {
	var ws unix.WaitStatus
	reaped := false
	if rt.child {
		// The pid cannot be reused before this reap: it is our zombie.
		if pid, err := unix.Wait4(rec.InitPID, &ws, unix.WNOHANG, nil); err == nil && pid == rec.InitPID {
			reaped = true
		}
	}
	return exitFrom(rec, reaped, ws, rt.sentKill.Load())
}

// exitFrom combines the evidence about an ended tree into its Exit.
func exitFrom(rec proctable.Record, reaped bool, ws unix.WaitStatus, sentKill bool) api.Exit {
	rep, err := sandbox.ReadExitReport(rec.StatusPath)
	switch {
	case err == nil && rep.Code != nil:
		return api.Exit{Code: rep.Code}
	case err == nil && rep.Signal != 0:
		return api.Exit{Signal: unix.SignalName(unix.Signal(rep.Signal))}
	case err == nil && rep.Error != "":
		return api.Exit{Unknown: true, Reason: rep.Error}
	case reaped && ws.Signaled():
		return api.Exit{Signal: unix.SignalName(ws.Signal())}
	case sentKill:
		return api.Exit{Signal: "SIGKILL"}
	case reaped:
		code := ws.ExitStatus()
		return api.Exit{Code: &code, Reason: "the init exited without a report"}
	}
	return api.Exit{Unknown: true, Reason: "ended while the daemon could not observe it"}
}
