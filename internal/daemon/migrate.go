package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/pkg/api"
)

// migrate moves a process onto other GPUs: a running one is frozen first
// (without stopping its tree), then restored with a device map. When the
// restore on the new GPUs fails, a process that was running is thawed back
// where it was.
func (d *Daemon) migrate(c *call) (any, error) {
	var p api.MigrateParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	unlock, rec, err := d.lockProcess(c, p.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !d.driver.Caps().DeviceMap {
		return nil, fmt.Errorf("migrate %q: %w: the %s checkpoint driver cannot restore onto other GPUs (needs a driver with device maps: driver 580, CUDA 13.0, or newer)",
			p.Name, checkpoint.ErrUnsupported, d.driverName())
	}
	pairs, err := d.migrationPairs(rec.GPUs, p)
	if err != nil {
		return nil, err
	}
	ctx := context.WithoutCancel(c.ctx)
	start := time.Now()
	var frozen api.CheckpointResult
	wasRunning := rec.State == api.StateRunning
	if wasRunning {
		if frozen, err = d.freezeLocked(ctx, rec, freezeOpts{lockTimeout: d.cfg.LockTimeout}); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		rec, _ = d.table.Get(rec.Key())
	}
	res, err := d.thawLocked(ctx, rec, thawOpts{op: "migrate", wait: time.Duration(p.Timeout), pairs: pairs, waitCtx: c.ctx})
	if err != nil {
		if !wasRunning {
			return nil, err
		}
		back, ok := d.table.Get(rec.Key())
		if ok && back.State == api.StateFrozen {
			if _, berr := d.thawLocked(ctx, back, thawOpts{op: "thaw", waitCtx: ctx}); berr != nil {
				d.log.Error("migrate: thawing back on the old GPUs failed", zap.String("name", p.Name), zap.Error(berr))
				return nil, fmt.Errorf("%w; thawing back on the old GPUs failed too: %v", err, berr)
			}
			return nil, fmt.Errorf("%w; the process was thawed back on its old GPUs", err)
		}
		return nil, err
	}
	for k, v := range frozen.MS {
		if k != "total" {
			res.MS["freeze_"+k] = v
		}
	}
	res.MS["total"] = msSince(start)
	return res, nil
}

// migrationPairs maps the process's GPUs, in order, to the requested ones:
// the GPUs that move, each onto one of its own chip type (thaw completes the
// map with those that stay).
func (d *Daemon) migrationPairs(current []string, p api.MigrateParams) ([]checkpoint.GPUPair, error) {
	what := fmt.Sprintf("migrate %q", p.Name)
	if p.GPU == nil && len(p.GPUs) == 0 {
		return nil, invalidf("%s: name the target GPU (gpu) or GPUs (gpus)", what)
	}
	targets, err := d.usableGPUs(what, p.GPU, p.GPUs)
	if err != nil {
		return nil, err
	}
	if len(targets) != len(current) {
		return nil, invalidf("%s: the process is on %d GPU(s); name one target per GPU, in order", what, len(current))
	}
	var pairs []checkpoint.GPUPair
	for i, uuid := range targets {
		if uuid != current[i] {
			pairs = append(pairs, checkpoint.GPUPair{Old: current[i], New: uuid})
		}
	}
	if len(pairs) == 0 {
		return nil, conflictf("%s: the process is already on those GPUs", what)
	}
	if err := d.sameChips(what, pairs); err != nil {
		return nil, err
	}
	return pairs, nil
}
