package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/gpusched/gpusched/internal/activate"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// activate makes a process resident (internal/activate decides how). With
// hold it streams one "activated" event and keeps the process held until
// the connection ends, with no final line; or until the caller shuts down
// its writing side, when the final line, the same Activation, says the hold
// has ended (so that a client can release it before its next call).
func (d *Daemon) activate(c *call, stream *eventStream) (any, error) {
	var p api.ActivateParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	out, release, err := d.activator.Activate(c.ctx, activateOps{d: d, c: c}, p)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, err
		}
		code, _ := toWire(err)
		return nil, &api.Error{Code: code, Message: err.Error()} // the whole story: what was frozen and rolled back
	}
	if release == nil {
		return out, nil
	}
	defer release()
	if err := stream.emit(&api.Event{Type: api.EventActivated, Time: time.Now(), Name: out.Name, Activation: &out}); err != nil {
		return nil, err
	}
	select {
	case <-c.ctx.Done(): // the caller hung up, or the daemon is shutting down
		return nil, c.ctx.Err()
	case <-c.eof:
		release()
		return out, nil
	}
}

// activeChange keeps the activations' recency: a process that starts
// running (run, thaw) is active now; a removed one is forgotten.
func (d *Daemon) activeChange(c proctable.Change) {
	switch {
	case c.New == nil && c.Old != nil:
		d.activator.Forget(c.Old.ID)
	case c.New != nil && c.New.State == api.StateRunning && (c.Old == nil || c.Old.State != api.StateRunning || c.Old.ID != c.New.ID):
		d.activator.Touch(c.New.ID)
	}
}

// activateOps does an activation's freezes and thaws as its caller.
type activateOps struct {
	d *Daemon
	c *call
}

func (o activateOps) Lookup(name string) (activate.Proc, error) {
	r, err := o.d.lookup(o.c, name)
	if err != nil {
		return activate.Proc{}, err
	}
	return activeProc(r), nil
}

func (o activateOps) Procs(uid uint32) []activate.Proc {
	var out []activate.Proc
	for _, r := range o.d.table.View().Records {
		if r.Owner.UID == uid {
			out = append(out, activeProc(*r))
		}
	}
	return out
}

func (o activateOps) Thaw(ctx context.Context, name string, wait time.Duration) (api.CheckpointResult, error) {
	c := o.as(ctx)
	unlock, rec, err := o.d.lockProcess(c, name)
	if err != nil {
		return api.CheckpointResult{}, err
	}
	defer unlock()
	return o.d.thawLocked(context.WithoutCancel(ctx), rec, thawOpts{op: "thaw", wait: wait, waitCtx: ctx})
}

func (o activateOps) Freeze(ctx context.Context, name string) (api.CheckpointResult, error) {
	c := o.as(ctx)
	unlock, rec, err := o.d.lockProcess(c, name)
	if err != nil {
		return api.CheckpointResult{}, err
	}
	defer unlock()
	return o.d.freezeLocked(context.WithoutCancel(ctx), rec, freezeOpts{lockTimeout: o.d.cfg.LockTimeout, stop: o.d.cfg.FreezeStop})
}

func (o activateOps) Swap(ctx context.Context, off, on string, wait time.Duration) (api.SwapResult, error) {
	return o.d.swapPair(o.as(ctx), api.SwapParams{Freeze: off, Thaw: on, Timeout: api.Duration(wait)})
}

// as is the activation's call with ctx.
func (o activateOps) as(ctx context.Context) *call {
	c := *o.c
	c.ctx = ctx
	return &c
}

func activeProc(r proctable.Record) activate.Proc {
	return activate.Proc{Name: r.Name, ID: r.ID, UID: r.Owner.UID, State: r.State, GPUs: r.GPUs, Job: r.Job != "", MPS: r.MPSClient()}
}
