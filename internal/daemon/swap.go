package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// swap freezes one process and thaws another: concurrently when the thawed
// one fits beside the frozen one's memory, else freeze first. When the
// thaw fails, the frozen side is thawed back.
func (d *Daemon) swap(c *call) (any, error) {
	var p api.SwapParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	return d.swapPair(c, p)
}

// swapPair is swap once its params are decoded.
func (d *Daemon) swapPair(c *call, p api.SwapParams) (api.SwapResult, error) {
	if p.Freeze == p.Thaw && p.Freeze != "" {
		return api.SwapResult{}, invalidf("swap: freeze and thaw name the same process %q", p.Freeze)
	}
	for _, name := range []string{p.Freeze, p.Thaw} {
		if _, _, _, err := splitRef(name); err != nil {
			return api.SwapResult{}, invalidf("swap: %v", err)
		}
	}
	var keys [2]proctable.Key
	for i, name := range []string{p.Freeze, p.Thaw} {
		r, err := d.lookup(c, name)
		if err != nil {
			return api.SwapResult{}, err
		}
		if err := refuseMPS(r); err != nil {
			return api.SwapResult{}, err
		}
		keys[i] = r.Key()
	}
	if keys[0] == keys[1] {
		return api.SwapResult{}, invalidf("swap: freeze and thaw name the same process %q", p.Freeze)
	}
	if err := d.needDriver(); err != nil {
		return api.SwapResult{}, err
	}
	// Lock in key order so that two opposite swaps cannot deadlock.
	first, second := keys[0], keys[1]
	if second.String() < first.String() {
		first, second = second, first
	}
	for _, k := range []proctable.Key{first, second} {
		unlock, err := d.ops.lock(c.ctx, k)
		if err != nil {
			return api.SwapResult{}, err
		}
		defer unlock()
	}
	off, err := d.lookupAgain(p.Freeze, keys[0])
	if err != nil {
		return api.SwapResult{}, err
	}
	on, err := d.lookupAgain(p.Thaw, keys[1])
	if err != nil {
		return api.SwapResult{}, err
	}
	switch {
	case off.State != api.StateRunning:
		return api.SwapResult{}, conflictf("swap: process %q is %s; only a running process can be frozen", off.Name, off.State)
	case on.State != api.StateFrozen:
		return api.SwapResult{}, conflictf("swap: process %q is %s; only a frozen process can be thawed", on.Name, on.State)
	}

	ctx := context.WithoutCancel(c.ctx)
	start := time.Now()
	fopts := freezeOpts{lockTimeout: d.cfg.LockTimeout, stop: d.cfg.FreezeStop}
	topts := thawOpts{op: "thaw", waitCtx: c.ctx}
	var res api.SwapResult
	var ferr, terr error
	if err := d.sampler.refresh(ctx); err != nil {
		return api.SwapResult{}, fmt.Errorf("swap: sample GPUs: %w", err)
	}
	if d.thaws.Fits(thawRequest(on, on.Checkpoint.VRAM())) {
		res.Concurrent = true
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); res.Freeze, ferr = d.freezeLocked(ctx, off, fopts) }()
		res.Thaw, terr = d.thawLocked(ctx, on, topts)
		wg.Wait()
	} else {
		topts.wait = time.Duration(p.Timeout)
		if res.Freeze, ferr = d.freezeLocked(ctx, off, fopts); ferr == nil {
			res.Thaw, terr = d.thawLocked(ctx, on, topts)
		}
	}
	res.MS = map[string]float64{"total": msSince(start)}
	switch {
	case terr != nil && ferr == nil:
		return api.SwapResult{}, d.swapBack(ctx, off, terr)
	case ferr != nil && !res.Concurrent:
		return api.SwapResult{}, fmt.Errorf("swap: %w; %q was not thawed", ferr, p.Thaw)
	case ferr != nil || terr != nil:
		return api.SwapResult{}, fmt.Errorf("swap: %w", joinErrors([]error{ferr, terr}))
	}
	return res, nil
}

// swapBack thaws the frozen side of a swap whose thaw failed, and returns
// the thaw's error with what became of the frozen side.
func (d *Daemon) swapBack(ctx context.Context, off proctable.Record, thawErr error) error {
	name := off.Name
	rec, ok := d.table.Get(off.Key())
	if !ok {
		return fmt.Errorf("swap: %w", thawErr)
	}
	if _, err := d.thawLocked(ctx, rec, thawOpts{op: "thaw", waitCtx: ctx}); err != nil {
		d.log.Error("swap: thawing the frozen side back failed", zap.String("name", name), zap.Error(err))
		return fmt.Errorf("swap: %w; thawing %q back failed too: %v", thawErr, name, err)
	}
	return fmt.Errorf("swap: %w; %q was thawed back", thawErr, name)
}
