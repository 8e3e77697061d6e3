package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/cudakind"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// freezeOpts are a freeze's knobs, defaults filled in.
type freezeOpts struct {
	lockTimeout time.Duration
	stop        bool
	toDisk      bool // a hibernate's freeze: the memory goes on to disk, past the RAM budget
	// preemptedBy (a job id) marks the freeze as a preemption, which
	// placement undoes; note says so to the owner.
	preemptedBy, note string
	quiet             bool // a policy's try: the policy logs its failure
}

// freeze parks a process's GPU memory in host RAM: lock every CUDA process
// of the tree, checkpoint them all, then stop the tree. Once begun it
// finishes (or rolls back) even if the caller goes away.
func (d *Daemon) freeze(c *call) (any, error) {
	var p api.FreezeParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	opts := freezeOpts{lockTimeout: time.Duration(p.LockTimeout), stop: d.cfg.FreezeStop}
	if opts.lockTimeout == 0 {
		opts.lockTimeout = d.cfg.LockTimeout
	}
	if p.Stop != nil {
		opts.stop = *p.Stop
	}
	unlock, rec, err := d.lockProcess(c, p.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return d.freezeLocked(context.WithoutCancel(c.ctx), rec, opts)
}

// lockProcess checks the driver and the caller's right to name, then takes
// name's lifecycle lock and returns the record as it is under the lock.
func (d *Daemon) lockProcess(c *call, name string) (func(), proctable.Record, error) {
	r, err := d.lookup(c, name)
	if err != nil {
		return nil, proctable.Record{}, err
	}
	if err := refuseMPS(r); err != nil {
		return nil, proctable.Record{}, err
	}
	if err := d.needDriver(); err != nil {
		return nil, proctable.Record{}, err
	}
	unlock, err := d.ops.lock(c.ctx, r.Key())
	if err != nil {
		return nil, proctable.Record{}, err
	}
	rec, err := d.lookupAgain(name, r.Key())
	if err != nil {
		unlock()
		return nil, proctable.Record{}, err
	}
	return unlock, rec, nil
}

// freezeLocked freezes rec; the caller holds its lifecycle lock. A process
// left locked or failed by an earlier attempt is resumed from the states
// the driver reports.
func (d *Daemon) freezeLocked(ctx context.Context, rec proctable.Record, opts freezeOpts) (api.CheckpointResult, error) {
	if err := refuseMPS(rec); err != nil {
		return api.CheckpointResult{}, err
	}
	if err := refuseFrozen("freeze", rec); err != nil {
		return api.CheckpointResult{}, err
	}
	start := time.Now()
	var procs []proctable.CheckpointProc
	var kinds map[int]cudakind.Kind
	assumed := checkpoint.StateRunning
	switch rec.State {
	case api.StateRunning:
		if err := d.gpuView().migError(fmt.Sprintf("freeze %q", rec.Name), rec.GPUs); err != nil {
			return api.CheckpointResult{}, err
		}
		var err error
		if procs, err = d.cudaProcs(ctx, rec); err != nil {
			return api.CheckpointResult{}, fmt.Errorf("freeze %q: %w", rec.Name, err)
		}
		kinds = cudaKinds(procs)
		if err := refuseKinds(rec.Name, procs, kinds); err != nil {
			return api.CheckpointResult{}, err
		}
	case api.StateLocked, api.StateFailed:
		if why := unrestorable(rec); why != "" {
			return api.CheckpointResult{}, conflictf("freeze %q: %s", rec.Name, why)
		}
		procs, assumed = liveProcs(checkpointed(rec)), ""
		if now, err := d.cudaProcs(ctx, rec); err == nil {
			procs = append(procs, missingFrom(now, procs)...)
		}
	case api.StateFrozen:
		return api.CheckpointResult{}, conflictf("process %q is already frozen", rec.Name)
	default:
		return api.CheckpointResult{}, conflictf("process %q is %s; only a running process can be frozen", rec.Name, rec.State)
	}
	if err := refuseStopped("freeze", rec, procs); err != nil {
		return api.CheckpointResult{}, err
	}
	if !opts.toDisk {
		need := (&proctable.Checkpoint{Procs: procs}).MiB()
		if err := d.makeRoom(ctx, fmt.Sprintf("freeze %q", rec.Name), need, rec.Key()); err != nil {
			return api.CheckpointResult{}, err
		}
	}
	rec, err := d.beginFreeze(rec, procs, opts)
	if err != nil {
		return api.CheckpointResult{}, err
	}
	op := d.newCudaOp(procs, assumed)
	dctx, unwatch, explain := watchTree(ctx, rec, op)
	defer unwatch()
	if assumed == "" {
		op.query(dctx)
	}
	var stopped []proctable.ProcRef
	err = op.freeze(dctx, opts.lockTimeout)
	if err == nil {
		rec, stopped, err = d.quiesce(dctx, rec, op, opts)
	}
	if err != nil {
		op.rollback(dctx)
		return d.failed(rec, op, "freeze", explain(kindHint(err, kinds)), nil, opts.quiet)
	}
	rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State = api.StateFrozen
		r.Checkpoint.Stopped, r.Checkpoint.FrozenAt = stopped, time.Now()
		return nil
	})
	if err != nil {
		return api.CheckpointResult{}, fmt.Errorf("freeze %q: %w", rec.Name, err)
	}
	d.onSample() // quiesce sampled the GPUs once every CUDA process was checkpointed
	op.ms["total"] = msSince(start)
	d.metrics.checkpointDone(opFreeze, time.Since(start), rec.Checkpoint.MiB()<<20)
	return d.result(rec, "freeze", op, rec.Checkpoint.MiB()), nil
}

// failed records where a failed freeze or thaw left the process, as the
// driver's own state query says, and returns the error that says so.
// stopped lists the processes of the tree stopped now; quiet lowers its log
// line to debug.
func (d *Daemon) failed(rec proctable.Record, op *cudaOp, what string, cause error, stopped []proctable.ProcRef, quiet bool) (api.CheckpointResult, error) {
	empty := api.StateRunning
	if what != "freeze" {
		empty = api.StateFrozen
	}
	state := op.verdict(empty)
	msg := fmt.Sprintf("%s failed: %v", what, cause)
	if state != api.StateFrozen {
		if err := continueTree(stopped); err != nil {
			d.log.Warn("continue tree", zap.String("name", rec.Name), zap.Error(err))
		}
		stopped = nil
	}
	_, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Error = state, msg
		if state == api.StateRunning {
			r.Checkpoint = nil
		} else if r.Checkpoint != nil {
			r.Checkpoint.Procs = op.procs
			r.Checkpoint.Stopped = stopped
		}
		return nil
	})
	d.sampler.kick()
	d.log.Log(failLevel(quiet), what+" failed", zap.String("name", rec.Name), zap.String("state", string(state)), zap.Error(cause))
	if err != nil {
		return api.CheckpointResult{}, fmt.Errorf("%s %q: %w (and recording the outcome failed: %v)", what, rec.Name, cause, err)
	}
	return api.CheckpointResult{}, fmt.Errorf("%s %q: %w; the process is now %s", what, rec.Name, cause, state)
}

// result renders a finished freeze or thaw.
func (d *Daemon) result(rec proctable.Record, what string, op *cudaOp, mib uint64) api.CheckpointResult {
	gpus := rec.GPUs
	if gpus == nil {
		gpus = []string{}
	}
	return api.CheckpointResult{Name: rec.Name, Op: what, State: rec.State, Driver: d.driverName(),
		PIDs: pidsOf(op.procs), Bytes: mib << 20, GPUs: gpus, MS: op.ms}
}
