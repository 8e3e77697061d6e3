package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/gpusched/gpusched/pkg/api"
)

// wait streams a process's state changes until it exits and answers with
// its final state.
func (d *Daemon) wait(c *call, stream *eventStream) (any, error) {
	var p api.WaitParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	rec, err := d.lookup(c, p.Name)
	if err != nil {
		return nil, err
	}
	id := rec.ID
	sub, cancel := d.events.subscribe(func(e *api.Event) bool { return e.Process != nil && e.Process.ID == id })
	defer cancel()
	// Re-read after subscribing so an exit in between is not missed.
	if cur, ok := d.table.Get(rec.Key()); ok && cur.ID == id {
		rec = cur
	}
	if !rec.Live() {
		return d.wholeCmd(c, toAPI(rec, d.gpuView()), rec), nil
	}
	ctx := c.ctx
	if p.Timeout > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, time.Duration(p.Timeout))
		defer stop()
	}
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				state := rec.State
				if cur, ok := d.table.Get(rec.Key()); ok {
					state = cur.State
				}
				return nil, api.Errorf(api.CodeTimeout, "process %q still %s after %s", p.Name, state, time.Duration(p.Timeout))
			}
			return nil, ctx.Err()
		case e, ok := <-sub.ch:
			if !ok {
				return nil, api.Errorf(api.CodeUnavailable, "wait %q: event stream closed; wait again", p.Name)
			}
			if err := stream.emit(&e); err != nil {
				return nil, err
			}
			if e.Type == api.EventRemoved || e.State == api.StateExited {
				if cur, ok := d.table.Get(rec.Key()); ok && cur.ID == id {
					return d.wholeCmd(c, toAPI(cur, d.gpuView()), cur), nil // as status has it
				}
				return e.Process, nil
			}
		}
	}
}
