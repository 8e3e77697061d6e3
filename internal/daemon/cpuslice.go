package daemon

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/cpuslice"
)

// keepCPUSlice gives the daemon's threads --cpu-slice until ctx ends, so
// that a thread woken by a request preempts a user's CPU-bound task
// instead of waiting out its slice (docs/operations.md, "The daemon's
// scheduler slice").
func (d *Daemon) keepCPUSlice(ctx context.Context) {
	s := d.cfg.CPUSlice
	if s == 0 {
		return
	}
	err := cpuslice.Keep(ctx, s, time.Second)
	switch {
	case errors.Is(err, cpuslice.ErrUnsupported):
		d.log.Info("--cpu-slice not applied: the kernel keeps no per-thread slice (Linux 6.12+); the daemon's threads keep its default", zap.Duration("slice", s))
	case err != nil:
		d.log.Warn("--cpu-slice not applied; the daemon's threads keep the kernel's default slice", zap.Duration("slice", s), zap.Error(err))
	default:
		d.log.Info("the daemon's threads run with a short scheduler slice", zap.Duration("slice", s))
	}
}
