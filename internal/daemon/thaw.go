package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/logreader"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// thawOpts are a thaw's knobs.
type thawOpts struct {
	op    string // "thaw" or "migrate", for messages and results
	wait  time.Duration
	pairs []checkpoint.GPUPair // restore onto other GPUs
	// waitCtx ends the admission wait (the caller hung up); the thaw itself,
	// once admitted, runs to the end.
	waitCtx context.Context
	// admitted: the caller already holds the admission (a thaw from disk).
	admitted bool
	// caller: the cgroups of the owner's process that asked (callerCgroups)
	caller logreader.Cgroups
}

// thaw brings a frozen process back onto its GPUs once they have room.
func (d *Daemon) thaw(c *call) (any, error) {
	var p api.ThawParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	unlock, rec, err := d.lockProcess(c, p.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return d.thawLocked(context.WithoutCancel(c.ctx), rec, thawOpts{op: "thaw", wait: time.Duration(p.Timeout), waitCtx: c.ctx,
		caller: callerCgroups(c, rec.Owner)})
}

// thawLocked thaws rec; the caller holds its lifecycle lock. The GPUs'
// room is admitted first; then the tree is continued, every checkpointed
// process restored (in parallel, with a complete device map when it moves)
// and unlocked. A failed restore is rolled back to frozen, but one that ran
// out of memory leaves the process failed for good (see restorelost.go); a
// failed unlock leaves the process locked, and a retry resumes it.
func (d *Daemon) thawLocked(ctx context.Context, rec proctable.Record, opts thawOpts) (api.CheckpointResult, error) {
	start := time.Now()
	switch rec.State {
	case api.StateHibernated:
		return d.thawFromDisk(ctx, rec, opts)
	case api.StateFrozen, api.StateLocked, api.StateFailed:
	case api.StateRunning:
		return api.CheckpointResult{}, conflictf("process %q is already running", rec.Name)
	default:
		return api.CheckpointResult{}, conflictf("process %q is %s; only a frozen process can be thawed", rec.Name, rec.State)
	}
	if err := refuseFrozen(opts.op, rec); err != nil {
		return api.CheckpointResult{}, err
	}
	op := d.newCudaOp(liveProcs(checkpointed(rec)), checkpoint.StateCheckpointed)
	if rec.Checkpoint != nil && len(rec.Checkpoint.Stopped) > 0 {
		op.reach.daemonStops(true) // until continued below
	}
	dctx, unwatch, explain := watchTree(ctx, rec, op)
	defer unwatch()
	if rec.State != api.StateFrozen {
		if err := refuseStopped(opts.op, rec, op.procs); err != nil {
			return api.CheckpointResult{}, err
		}
		op.query(dctx)
	}
	gpus, remap := remapGPUs(rec.GPUs, opts.pairs)
	need := map[string]uint64{}
	for _, p := range op.procs {
		if op.states[p.PID] == checkpoint.StateCheckpointed {
			for uuid, mib := range p.VRAM {
				need[remap(uuid)] += mib
			}
		}
	}

	if !opts.admitted {
		t := time.Now()
		if err := d.sampler.refresh(ctx); err != nil {
			return api.CheckpointResult{}, fmt.Errorf("%s %q: sample GPUs: %w", opts.op, rec.Name, err)
		}
		op.ms["sample"] = msSince(t)
		if err := d.gpuView().lostError(fmt.Sprintf("%s %q", opts.op, rec.Name), sortedKeys(need)); err != nil {
			return api.CheckpointResult{}, err
		}
		t = time.Now()
		release, err := d.admit(opts.waitCtx, fmt.Sprintf("%s %q", opts.op, rec.Name), rec, need, opts.wait)
		if err != nil {
			return api.CheckpointResult{}, err
		}
		defer release()
		op.ms["admit"] = msSince(t)
	}

	var stopped []proctable.ProcRef
	if rec.Checkpoint != nil {
		stopped = rec.Checkpoint.Stopped
	}
	rec, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Error = api.StateThawing, ""
		if r.Checkpoint != nil {
			r.Checkpoint.Stopped = nil // continued just below
		}
		return nil
	})
	if err != nil {
		return api.CheckpointResult{}, fmt.Errorf("%s %q: %w", opts.op, rec.Name, err)
	}
	if len(stopped) > 0 {
		t := time.Now()
		if err := continueTree(stopped); err != nil {
			d.log.Warn("continue tree", zap.String("name", rec.Name), zap.Error(err))
		}
		op.ms["continue"] = msSince(t)
	}
	op.reach.daemonStops(false)
	if err := refuseStopped(opts.op, rec, op.procs); err != nil {
		var restopped []proctable.ProcRef
		if len(stopped) > 0 {
			restopped, _ = d.stopTree(rec.InitPID, rec.Owner.UID)
		}
		return d.failed(rec, op, opts.op, err, restopped, false)
	}
	if err := op.restore(dctx, deviceMap(rec.GPUs, op.procs, opts.pairs)); err != nil {
		op.refreeze(dctx)
		err = explain(err)
		if errors.Is(err, checkpoint.ErrOutOfMemory) || unrestorable(rec) != "" {
			return d.restoreLost(rec, op, opts.op, err)
		}
		op.forgetTimedOut(err)
		var restopped []proctable.ProcRef
		if len(stopped) > 0 && op.verdict(api.StateFrozen) == api.StateFrozen {
			restopped, _ = d.stopTree(rec.InitPID, rec.Owner.UID)
		}
		return d.failed(rec, op, opts.op, err, restopped, false)
	}
	if len(opts.pairs) > 0 {
		// The memory is on the new GPUs now, whatever the unlock does.
		rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
			r.GPUs = gpus
			for i := range checkpointed(*r) {
				r.Checkpoint.Procs[i].VRAM = remapVRAM(r.Checkpoint.Procs[i].VRAM, remap)
			}
			return nil
		})
		if err != nil {
			return api.CheckpointResult{}, fmt.Errorf("%s %q: %w", opts.op, rec.Name, err)
		}
	}
	err = op.unlock(dctx)
	if err == nil {
		err = op.expect(api.StateRunning)
	}
	if err != nil {
		op.query(dctx)
		return d.failed(rec, op, opts.op, explain(err), nil, false)
	}
	mib := rec.Checkpoint.MiB()
	rec, err = d.table.Update(rec.Key(), func(r *proctable.Record) error {
		if r.ID != rec.ID {
			return errReplaced
		}
		r.State, r.Checkpoint, r.Restored = api.StateRunning, nil, true
		return nil
	})
	if err != nil {
		return api.CheckpointResult{}, fmt.Errorf("%s %q: %w", opts.op, rec.Name, err)
	}
	// The restored memory must show in a sample before the reservation
	// that stood for it is released.
	t := time.Now()
	if err := d.sampler.refresh(ctx); err != nil {
		d.log.Warn("GPU sample after thaw", zap.Error(err))
	}
	op.ms["sample"] += msSince(t)
	op.ms["total"] = msSince(start)
	d.metrics.checkpointDone(opThaw, time.Since(start), mib<<20)
	return d.result(rec, opts.op, op, mib), nil
}

// forgetTimedOut makes unknown the state of each process whose restore
// timed out, so that the process is recorded locked and the next thaw asks
// the driver. Such a restore may yet complete: a real one waits for the
// process's restore thread (stopped by its owner, say) and goes on once it
// runs, and the api driver's call runs on in its helper past the deadline.
func (op *cudaOp) forgetTimedOut(err error) {
	errs := []error{err}
	if j, ok := err.(joinedError); ok {
		errs = j
	}
	for _, e := range errs {
		var oe *checkpoint.OpError
		if errors.As(e, &oe) && errors.Is(e, checkpoint.ErrTimeout) {
			op.states[oe.PID] = ""
		}
	}
}
