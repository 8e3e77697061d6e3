package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/pkg/api"
)

// acquire waits for GPUs that meet the caller's thresholds and leases them
// to the caller's connection: placement counts them as occupied until
// release, or until that connection closes. It is a streaming call only so
// that a caller who hangs up while waiting is noticed; it sends no events.
func (d *Daemon) acquire(c *call, _ *eventStream) (any, error) {
	var p api.AcquireParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	what := leaseWhat(p)
	switch {
	case p.GPUs < 0:
		return nil, invalidf("acquire: gpus %d: must be at least 1", p.GPUs)
	case p.MinFree.Auto:
		return nil, invalidf("acquire: min_free must be a size like \"20G\", not auto")
	case p.MaxUtil < 0 || p.MaxUtil > 100:
		return nil, invalidf("acquire: max_util %d: must be 0..100", p.MaxUtil)
	case p.MaxPower < 0:
		return nil, invalidf("acquire: max_power %v: must not be negative", p.MaxPower)
	case p.MaxTemp < 0 || p.MaxTemp > config.MaxTempC:
		return nil, invalidf("acquire: max_temp %d: must be 0..%d degrees C", p.MaxTemp, config.MaxTempC)
	case p.Priority < -maxJobPriority || p.Priority > maxJobPriority:
		return nil, invalidf("acquire: priority %d: must be %d..%d", p.Priority, -maxJobPriority, maxJobPriority)
	}
	if err := d.checkUserPriority(c.actor, "acquire", p.Priority); err != nil {
		return nil, err
	}
	l := &lease{uid: c.actor.UID, user: c.actor.User, peerPID: c.actor.PID, mib: p.MinFree.MiB, count: max(p.GPUs, 1),
		maxUtil: p.MaxUtil, maxPower: p.MaxPower, maxTemp: p.MaxTemp, priority: p.Priority, queuedAt: time.Now()}
	if len(p.GPUIDs) > 0 {
		uuids, err := d.usableGPUs("acquire", nil, p.GPUIDs)
		if err != nil {
			return nil, err
		}
		l.only = uuids
	}
	if err := d.leases.add(l, d.lastJobSeq(), d.admitLease(c.actor, l)); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	d.sched.kick()
	ctx := c.ctx
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(p.Timeout))
		defer cancel()
	}
	for {
		granted, refused, reason := d.leases.status(l)
		switch {
		case granted:
			c.conn.onClose(func() { d.releaseLease(l.id, "") })
			d.limitHold(c.actor, l.id)
			h, _ := d.leases.heldCopy(l.id)
			d.syncFillers(ctx, h.uuids) // the owner's fillers hand the lease its memory
			out := leaseToAPI(h, d.gpuView())
			d.events.publish(api.Event{Type: api.EventLease, Time: time.Now(), Name: l.id, Lease: &out})
			return out, nil
		case refused:
			return nil, api.Errorf(api.CodeResourceExhausted, "%s: can never be granted on this machine: %s", what, reason)
		case p.Timeout == 0 && reason != "":
			d.leases.remove(l.id)
			return nil, api.Errorf(api.CodeResourceExhausted, "%s: %s (pass a timeout to wait)", what, reason)
		}
		select {
		case <-l.wake:
		case <-ctx.Done():
			if d.leases.remove(l.id) != nil {
				d.sched.kick()
			}
			if ctx.Err() == context.DeadlineExceeded {
				return nil, api.Errorf(api.CodeTimeout, "%s: waited %v: %s", what, time.Duration(p.Timeout), reason)
			}
			return nil, ctx.Err()
		}
	}
}

// release ends a lease of the caller's.
func (d *Daemon) release(c *call) (any, error) {
	var p api.ReleaseParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if p.ID == "" {
		return nil, invalidf("release: id is empty; give the id acquire returned")
	}
	h, ok := d.leases.heldCopy(p.ID)
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "lease %q not found", p.ID)
	}
	if !c.actor.owns(h.uid) {
		return nil, deniedf("lease %q belongs to %s; you (%s) may only release your own leases", p.ID, h.user, c.actor.User)
	}
	out := leaseToAPI(h, d.gpuView())
	d.releaseLease(p.ID, "")
	return out, nil
}

// releaseLease ends a lease (a no-op, false, when it is already gone) and
// lets placement use its GPUs at once. why, when the daemon ends it by
// itself, is the release event's warning.
func (d *Daemon) releaseLease(id, why string) bool {
	h, ok := d.leases.heldCopy(id)
	if d.leases.remove(id) == nil {
		return false
	}
	d.sched.kick()
	if ok {
		out := leaseToAPI(h, d.gpuView())
		out.ReleasedAt = time.Now()
		d.events.publish(api.Event{Type: api.EventLease, Time: time.Now(), Name: id, Lease: &out, Warning: why})
	}
	return true
}

// listLeases lists the held leases the caller may see.
func (d *Daemon) listLeases(c *call) (any, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return nil, err
	}
	gv := d.gpuView()
	out := api.LeasesResult{Leases: []api.Lease{}}
	for _, h := range d.leases.granted() {
		if c.actor.owns(h.uid) {
			out.Leases = append(out.Leases, leaseToAPI(h, gv))
		}
	}
	return out, nil
}
