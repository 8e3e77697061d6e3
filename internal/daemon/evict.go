package daemon

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// makeRoom hibernates frozen processes, by policy, until need more MiB fit
// the host RAM budget beside what frozen processes hold. Nothing is ever
// killed: when nothing can be evicted the caller's freeze fails, saying why.
func (d *Daemon) makeRoom(ctx context.Context, what string, need uint64, skip proctable.Key) error {
	budget := d.cfg.RAMBudgetMiB
	if budget == 0 {
		return nil
	}
	tried := map[proctable.Key]bool{skip: true}
	for {
		held := d.hostMiB(&skip)
		if held+need <= budget {
			return nil
		}
		if d.criu == nil {
			return api.Errorf(api.CodeResourceExhausted, "%s needs %d MiB of host RAM; frozen processes hold %d MiB of the %d MiB --ram-budget and the disk tier that could take them is off (%v)",
				what, need, held, budget, d.criuErr)
		}
		victims, pinned := d.victims(tried)
		if len(victims) == 0 {
			msg := fmt.Sprintf("%s needs %d MiB of host RAM; frozen processes hold %d MiB of the %d MiB --ram-budget and none can be hibernated to make room",
				what, need, held, budget)
			if len(pinned) > 0 {
				msg += " (pinned: " + strings.Join(pinned, ", ") + ")"
			}
			return api.Errorf(api.CodeResourceExhausted, "%s", msg)
		}
		v := victims[0]
		tried[v.Key()] = true
		why := fmt.Sprintf("hibernated to make room in host RAM for %s", what)
		if _, err := d.evict(ctx, v, hibernateOpts{why: why, freed: true}); err != nil {
			d.log.Warn("eviction failed", zap.String("name", v.Name), zap.String("why", why), zap.Error(err))
		}
	}
}

// victims lists the frozen processes eviction may hibernate, in policy
// order: lowest priority first, then least recently frozen. pinned names
// the frozen ones it may not.
func (d *Daemon) victims(skip map[proctable.Key]bool) (out []proctable.Record, pinned []string) {
	for _, r := range d.table.View().Records {
		if r.State != api.StateFrozen || skip[r.Key()] {
			continue
		}
		if r.Policy.Pin {
			pinned = append(pinned, r.Name)
			continue
		}
		out = append(out, *r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Policy.Priority != b.Policy.Priority {
			return a.Policy.Priority < b.Policy.Priority
		}
		return a.Checkpoint.FrozenAt.Before(b.Checkpoint.FrozenAt)
	})
	return out, pinned
}

// evict hibernates v with o if its lifecycle lock is free and it is still
// frozen; o.why is recorded on the process. It reports whether it tried.
func (d *Daemon) evict(ctx context.Context, v proctable.Record, o hibernateOpts) (bool, error) {
	unlock, ok := d.ops.tryLock(v.Key())
	if !ok {
		return false, nil
	}
	defer unlock()
	cur, ok := d.table.Get(v.Key())
	if !ok || cur.ID != v.ID || cur.State != api.StateFrozen {
		return false, nil
	}
	if _, err := d.hibernateLocked(ctx, cur, o); err != nil {
		return true, err
	}
	d.log.Info("evicted to disk", zap.String("name", v.Name), zap.String("why", o.why))
	return true, nil
}
