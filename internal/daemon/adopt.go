package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/sandbox"
	"github.com/gpusched/gpusched/pkg/api"
)

// adoptAll reconciles every live record with /proc after a (re)start:
// trees still running are watched again, the others are marked exited
// with whatever their init reported.
func (d *Daemon) adoptAll(ctx context.Context) {
	for _, rec := range d.table.View().Records {
		if ctx.Err() != nil {
			return
		}
		if rec.Live() {
			d.adopt(*rec)
		}
	}
}

func (d *Daemon) adopt(rec proctable.Record) {
	log := d.log.With(zap.String("name", rec.Name), zap.Int("init_pid", rec.InitPID))
	switch {
	case rec.State == api.StateHibernated:
		// On disk: independent of this boot and of any pid.
		if _, ok := d.snaps.Get(rec.Snapshot); !ok {
			d.markExited(rec, api.Exit{Unknown: true, Reason: "its snapshot " + rec.Snapshot + " is missing from --snapshot-dir"}, log)
		}
		return
	case rec.State == api.StateRestoring:
		// The restore's outcome is unknown (a tree it left is swept as
		// untracked); the image is intact, but for a fork copy's, which is
		// discarded with its incomplete fork image.
		if _, ok := d.snaps.Get(rec.Snapshot); !ok {
			d.markExited(rec, api.Exit{Unknown: true, Reason: "the daemon restarted while it was being restored, and its image is gone"}, log)
			return
		}
		if _, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
			r.State, r.Error = api.StateHibernated, "the daemon restarted during a restore from disk"
			return nil
		}); err != nil {
			log.Error("settle an interrupted restore", zap.Error(err))
		}
		return
	case rec.State == api.StateHibernating:
		d.settleHibernating(rec)
		if cur, ok := d.table.Get(rec.Key()); !ok || cur.State != api.StateFrozen {
			return
		}
		rec, _ = d.table.Get(rec.Key())
	case rec.BootID != d.bootID:
		d.markExited(rec, api.Exit{Unknown: true, Reason: "the machine rebooted"}, log)
		return
	case rec.InitPID == 0:
		d.markExited(rec, api.Exit{Unknown: true, Reason: "the daemon stopped before the process started"}, log)
		return
	}
	pidfd, err := unix.PidfdOpen(rec.InitPID, unix.PIDFD_NONBLOCK)
	if err == nil && !procfs.Alive(rec.InitPID, rec.InitStart) {
		unix.Close(pidfd) // the pid now names another process
		err = unix.ESRCH
	}
	if err != nil {
		d.markExited(rec, exitFrom(rec, false, 0, false), log)
		return
	}
	child := isChild(rec.InitPID)
	rt := d.procs.add(rec.ID, rec.InitPID, pidfd, child)
	starting := rec.State == api.StateStarting
	if starting {
		if r, ok := d.commandStarted(rec); ok {
			rec, starting = r, false
		}
	}
	d.adoptCPU(rec)
	d.watch(rec, rt)
	if starting {
		d.awaitCommand(rec, rt)
	}
	if rec.State == api.StateFreezing || rec.State == api.StateThawing {
		rec = d.settleInterrupted(rec, log)
	}
	log.Info("re-adopted process", zap.Int("pid", rec.PID), zap.String("state", string(rec.State)))
}

// commandStarted records rec as running once its supervisor's command
// exists; false while it does not.
func (d *Daemon) commandStarted(rec proctable.Record) (proctable.Record, bool) {
	pid, err := sandbox.FindCommand(rec.InitPID)
	if err != nil {
		return rec, false
	}
	start, _ := procfs.StartTime(pid)
	r, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID || r.State != api.StateStarting {
			return errReplaced
		}
		r.State, r.PID, r.PIDStart, r.StartedAt = api.StateRunning, pid, start, time.Now()
		return nil
	})
	return r, err == nil
}

// commandPoll is how often awaitCommand looks for a command.
const commandPoll = 20 * time.Millisecond

// awaitCommand records a tree adopted as starting as running once its
// command appears: a daemon killed between its "go" and the supervisor's
// "started" left the supervisor starting the command with nobody to tell.
// Nothing reports another process's fork as an event, so it polls, until
// the command appears, the tree ends, startTimeout passes or the daemon
// stops.
func (d *Daemon) awaitCommand(rec proctable.Record, rt *procRuntime) {
	d.procs.wg.Add(1)
	go func() {
		defer d.procs.wg.Done()
		tick := time.NewTicker(commandPoll)
		defer tick.Stop()
		deadline := time.After(startTimeout)
		for {
			select {
			case <-rt.exited:
				return
			case <-d.procs.closing:
				return
			case <-deadline:
				d.log.Warn("adopted tree never started its command", zap.String("name", rec.Name), zap.Int("init_pid", rec.InitPID))
				return
			case <-tick.C:
			}
			if _, ok := d.commandStarted(rec); ok {
				d.sampler.kick()
				return
			}
		}
	}()
}

// settleInterrupted decides where a freeze or thaw cut short by a daemon
// crash left the process, from the driver's own state query.
func (d *Daemon) settleInterrupted(rec proctable.Record, log *zap.Logger) proctable.Record {
	state, empty := api.StateLocked, api.StateRunning
	if rec.State == api.StateThawing {
		empty = api.StateFrozen
	}
	// The crash may have come between stopping the tree and recording it,
	// and the driver answers nothing for a stopped process (docs/hardware.md):
	// the tree runs while the driver is asked, and is stopped again below
	// where it stays frozen.
	if err := continueTree(stoppedIn(rec.InitPID)); err != nil {
		log.Warn("continue tree", zap.Error(err))
	}
	var procs []proctable.CheckpointProc
	if d.driver != nil {
		ctx := context.Background()
		procs = liveProcs(checkpointed(rec))
		if now, err := d.cudaProcs(ctx, rec); err == nil {
			procs = append(procs, missingFrom(now, procs)...) // started using the GPU during the freeze
		}
		op := d.newCudaOp(procs, "")
		op.query(ctx)
		state, procs = op.verdict(empty), op.procs
	}
	var stopped []proctable.ProcRef
	if state == api.StateFrozen && d.cfg.FreezeStop {
		var err error
		if stopped, err = d.stopTree(rec.InitPID, rec.Owner.UID); err != nil {
			log.Warn("stop frozen tree", zap.Error(err))
		}
	}
	msg := fmt.Sprintf("the daemon restarted during a %s; the checkpoint driver reports it %s", opOf(rec.State), state)
	out, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		r.State, r.Error = state, msg
		switch {
		case state == api.StateRunning:
			r.Checkpoint = nil
		case r.Checkpoint != nil:
			if procs != nil {
				r.Checkpoint.Procs = procs
			}
			r.Checkpoint.Stopped = stopped
		}
		return nil
	})
	if err != nil {
		log.Error("settle an interrupted freeze or thaw", zap.Error(err))
		return rec
	}
	log.Warn("settled an interrupted freeze or thaw", zap.String("state", string(state)))
	return out
}

// opOf names the operation a transient state belongs to.
func opOf(s api.State) string {
	if s == api.StateThawing {
		return "thaw"
	}
	return "freeze"
}

func (d *Daemon) markExited(rec proctable.Record, exit api.Exit, log *zap.Logger) {
	d.removeSandboxHome(rec.ID)
	d.removeCPU(rec)
	log.Info("process ended while the daemon was away", zap.Any("exit", exit))
	d.keepExit(rec, exit, log)
}

// isChild reports whether pid is this daemon's child (a daemon restarted
// in the same process, as tests do), so its exit must be reaped here.
func isChild(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.PPID == unix.Getpid()
}
