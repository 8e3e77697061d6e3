package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// policyTick is how often TTL and idle policies are checked.
const policyTick = 250 * time.Millisecond

// runPolicies applies the time-based policies until ctx ends: a frozen
// process past its TTL is hibernated, a running one whose GPUs have been
// idle for its Idle time is frozen.
func (d *Daemon) runPolicies(ctx context.Context) {
	t := time.NewTicker(policyTick)
	defer t.Stop()
	idle := idleTracker{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			d.applyPolicies(ctx, now, idle)
		}
	}
}

func (d *Daemon) applyPolicies(ctx context.Context, now time.Time, idle idleTracker) {
	view := d.gpuView()
	seen := map[string]bool{}
	for _, r := range d.table.View().Records {
		seen[r.ID] = true
		switch {
		case r.State == api.StateFrozen && r.Policy.TTL > 0 && d.criu != nil && !r.Policy.Pin &&
			now.Sub(r.Checkpoint.FrozenAt) >= time.Duration(r.Policy.TTL):
			d.evict(ctx, r, fmt.Sprintf("hibernated after %v frozen (ttl)", time.Duration(r.Policy.TTL)))
		case r.State == api.StateRunning && r.Policy.Idle > 0 && !r.MPSClient(): // MPS clients cannot be frozen
			if since := idle.observe(r, view, now); now.Sub(since) >= time.Duration(r.Policy.Idle) {
				delete(idle, r.ID)
				d.idleFreeze(ctx, r, now.Sub(since))
			}
		}
	}
	for id := range idle {
		if !seen[id] {
			delete(idle, id)
		}
	}
}

// idleFreeze freezes r after its GPUs were idle for long enough.
func (d *Daemon) idleFreeze(ctx context.Context, r proctable.Record, idleFor time.Duration) {
	if d.driver == nil {
		return
	}
	unlock, ok := d.ops.tryLock(r.Name)
	if !ok {
		return
	}
	defer unlock()
	cur, ok := d.table.Get(r.Name)
	if !ok || cur.ID != r.ID || cur.State != api.StateRunning {
		return
	}
	if _, err := d.freezeLocked(ctx, cur, freezeOpts{lockTimeout: d.cfg.LockTimeout, stop: d.cfg.FreezeStop}); err != nil {
		d.log.Warn("idle freeze failed", zap.String("name", r.Name), zap.Error(err))
		return
	}
	_, _ = d.table.Update(r.Name, func(x *proctable.Record) error {
		if x.ID == r.ID {
			x.Note = fmt.Sprintf("frozen after its GPUs were idle for %v (idle)", idleFor.Round(time.Millisecond))
		}
		return nil
	})
	d.log.Info("froze an idle process", zap.String("name", r.Name), zap.Duration("idle", idleFor))
}

// idleTracker remembers, per running process, since when its GPU memory
// has not changed and its GPUs have shown no utilization.
type idleTracker map[string]idleMark

type idleMark struct {
	vram  uint64
	since time.Time
}

// observe returns since when r has been idle (now if it is busy).
func (t idleTracker) observe(r proctable.Record, view *gpuView, now time.Time) time.Time {
	p := toAPI(r, view)
	busy := false
	for _, g := range p.GPUs {
		for _, dv := range view.devices {
			if dv.UUID == g.UUID && dv.UtilPercent != nil && *dv.UtilPercent > 0 {
				busy = true
			}
		}
	}
	m, ok := t[r.ID]
	if !ok || busy || m.vram != p.VRAMMiB {
		m = idleMark{vram: p.VRAMMiB, since: now}
		t[r.ID] = m
	}
	return m.since
}
