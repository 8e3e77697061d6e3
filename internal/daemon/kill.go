package daemon

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// reapTimeout bounds the wait for a tree to vanish after SIGKILL.
const reapTimeout = 10 * time.Second

// kill ends a tree: SIGTERM to every process, SIGKILL after the grace, and
// answers with the final state. With a signal param it only delivers that
// signal (SIGKILL after suspendRestored). The kill goes on even if the
// caller disconnects.
func (d *Daemon) kill(c *call) (any, error) {
	var p api.KillParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	rec, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	if p.Signal != "" {
		sig, err := parseSignal(p.Signal)
		if err != nil {
			return nil, invalidf("kill %q: %v", p.Name, err)
		}
		switch {
		case !rec.Live():
			return nil, conflictf("process %q already exited", p.Name)
		case rec.State == api.StateStarting:
			return nil, conflictf("process %q is still starting; signal it once it runs", p.Name)
		case onDisk(rec.State):
			return nil, conflictf("process %q is %s: no process exists to signal; thaw it first, or kill it without a signal", p.Name, rec.State)
		}
		if sig == unix.SIGKILL && rec.Restored {
			unlock, err := d.ops.lock(context.WithoutCancel(c.ctx), rec.Key())
			if err != nil {
				return nil, err
			}
			defer unlock()
			if cur, ok := d.table.Get(rec.Key()); ok && cur.ID == rec.ID {
				d.suspendRestored(cur)
			}
		}
		if err := d.signalTree(rec.ID, sig); err != nil {
			return nil, fmt.Errorf("kill %q: %w", p.Name, err)
		}
		if cur, ok := d.table.Get(rec.Key()); ok {
			rec = cur
		}
		return toAPI(rec, d.gpuView()), nil
	}
	grace := time.Duration(p.Grace)
	if grace == 0 {
		grace = d.cfg.KillGrace
	}
	ctx := context.WithoutCancel(c.ctx)
	unlock, err := d.ops.lock(ctx, rec.Key())
	if err != nil {
		return nil, err
	}
	defer unlock()
	rec, err = d.lookupAgain(p.Name, rec.Key())
	if err != nil {
		return nil, err
	}
	switch {
	case !rec.Live():
		return nil, conflictf("process %q already exited", p.Name)
	case rec.State == api.StateHibernated:
		return d.killHibernated(rec)
	}
	final, err := d.endTree(rec, grace)
	if err != nil {
		return nil, err
	}
	return toAPI(final, d.gpuView()), nil
}

// endTree ends a live tree, frozen ones included: SIGTERM, SIGKILL after
// grace, and waits until its exit is recorded. A tree running restored
// CUDA contexts is suspended first (suspendRestored). The caller holds its
// lifecycle lock.
func (d *Daemon) endTree(rec proctable.Record, grace time.Duration) (proctable.Record, error) {
	rt := d.procs.get(rec.ID)
	if rt == nil {
		return rec, fmt.Errorf("kill %q: the daemon is not watching this process (state %s)", rec.Name, rec.State)
	}
	d.suspendRestored(rec)
	if err := rt.signal(unix.SIGTERM); err != nil {
		return rec, fmt.Errorf("kill %q: SIGTERM: %w", rec.Name, err)
	}
	if rec.Checkpoint != nil && len(rec.Checkpoint.Stopped) > 0 {
		// A stopped tree acts on SIGTERM only once continued.
		if err := continueTree(rec.Checkpoint.Stopped); err != nil {
			return rec, fmt.Errorf("kill %q: SIGCONT: %w", rec.Name, err)
		}
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-rt.exited:
	case <-timer.C:
		d.log.Info("grace over, killing", zap.String("name", rec.Name), zap.Duration("grace", grace))
		rt.sentKill.Store(true)
		if err := rt.signal(unix.SIGKILL); err != nil {
			return rec, fmt.Errorf("kill %q: SIGKILL: %w", rec.Name, err)
		}
		select {
		case <-rt.exited:
		case <-time.After(reapTimeout):
			return rec, fmt.Errorf("kill %q: tree still present %v after SIGKILL", rec.Name, reapTimeout)
		}
	}
	final, _ := d.table.Get(rec.Key())
	return final, nil
}

// signalTree delivers sig to every process of a tree. Signals the init
// forwards go to the init, which passes them to its whole namespace;
// SIGKILL to the init ends the namespace; others (STOP, CONT, ...) go to
// each process directly, each pinned by a pidfd checked against its start
// time so a reused pid is never hit.
func (d *Daemon) signalTree(id string, sig unix.Signal) error {
	rt := d.procs.get(id)
	if rt == nil {
		return conflictf("process has no running tree")
	}
	switch sig {
	case unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH:
		return rt.signal(sig)
	case unix.SIGKILL:
		rt.sentKill.Store(true)
		return rt.signal(sig)
	}
	tree, err := procfs.ScanTree()
	if err != nil {
		return err
	}
	if err := rt.signal(sig); err != nil {
		return err
	}
	for _, pid := range tree.Descendants(rt.initPID) {
		if err := signalPid(pid, sig); err != nil {
			return err
		}
	}
	return nil
}

// signalPid signals pid unless it has exited since it was seen.
func signalPid(pid int, sig unix.Signal) error {
	start, err := procfs.StartTime(pid)
	if err != nil {
		return nil
	}
	return signalRef(proctable.ProcRef{PID: pid, Start: start}, sig)
}

// parseSignal accepts "TERM", "SIGTERM", "sigterm" or "15".
func parseSignal(s string) (unix.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal %d is out of range", n)
		}
		return unix.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	sig := unix.SignalNum(name)
	if sig == 0 {
		return 0, fmt.Errorf("unknown signal %q", s)
	}
	return sig, nil
}

// killHibernated ends a process that lives only in its snapshot: the
// snapshot is deleted and the process recorded as killed.
func (d *Daemon) killHibernated(rec proctable.Record) (any, error) {
	out, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.ExitedAt = api.StateExited, time.Now()
		r.Exit = &api.Exit{Signal: "SIGKILL", Reason: "killed while hibernated; its snapshot was deleted"}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kill %q: %w", rec.Name, err)
	}
	d.dropSnapshots(rec.ID)
	d.log.Info("killed a hibernated process", zap.String("name", rec.Name), zap.String("snapshot", rec.Snapshot))
	return toAPI(out, d.gpuView()), nil
}
