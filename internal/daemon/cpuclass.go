package daemon

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/cpuslice"
	"github.com/gpusched/gpusched/internal/rtprio"
)

// How often the daemon's CPU at real time is checked against
// --realtime-cpu while it uses CPU, and how often threads the runtime
// started since are brought to their class.
const (
	realtimeWindow = 50 * time.Millisecond
	threadPass     = time.Second
)

// keepCPUClass runs the daemon's threads until ctx ends at
// --realtime-priority within --realtime-cpu, or, where that is off or the
// kernel refuses it, in the fair class at --cpu-slice, so that a thread
// woken by a request runs ahead of users' CPU-bound processes
// (docs/operations.md, "The daemon's CPU class").
func (d *Daemon) keepCPUClass(ctx context.Context) {
	if p := d.cfg.RealtimePriority; p > 0 {
		err := rtprio.Keep(ctx, rtprio.Options{
			Priority: p, Budget: d.cfg.RealtimeCPU, Window: realtimeWindow, Pass: threadPass, Slice: d.cfg.CPUSlice,
			Changed: d.realtimeChanged,
		})
		switch {
		case err == nil:
			d.log.Info("the daemon's threads run at real time", zap.Int("priority", p), zap.Float64("cpu", d.cfg.RealtimeCPU))
			return
		case errors.Is(err, rtprio.ErrRefused):
			d.log.Info("--realtime-priority not applied: the kernel gives the daemon no real-time class here; its threads run in the fair class", zap.Int("priority", p), zap.Error(err))
		default:
			d.log.Warn("--realtime-priority not applied; the daemon's threads run in the fair class", zap.Int("priority", p), zap.Error(err))
		}
	}
	d.keepCPUSlice(ctx)
}

// realtimeChanged records the daemon's threads entering real time, and
// leaving it over --realtime-cpu.
func (d *Daemon) realtimeChanged(realtime bool) {
	d.metrics.realtime(realtime)
	if realtime {
		d.log.Debug("the daemon's threads are at real time")
		return
	}
	d.log.Debug("the daemon's threads left real time: it used more than --realtime-cpu", zap.Float64("cpu", d.cfg.RealtimeCPU))
}

// keepCPUSlice gives the daemon's threads --cpu-slice until ctx ends, so
// that a thread woken by a request preempts a user's CPU-bound task
// instead of waiting out its slice.
func (d *Daemon) keepCPUSlice(ctx context.Context) {
	s := d.cfg.CPUSlice
	if s == 0 {
		return
	}
	err := cpuslice.Keep(ctx, s, threadPass)
	switch {
	case errors.Is(err, cpuslice.ErrUnsupported):
		d.log.Info("--cpu-slice not applied: the kernel keeps no per-thread slice (Linux 6.12+); the daemon's threads keep its default", zap.Duration("slice", s))
	case err != nil:
		d.log.Warn("--cpu-slice not applied; the daemon's threads keep the kernel's default slice", zap.Duration("slice", s), zap.Error(err))
	default:
		d.log.Info("the daemon's threads run with a short scheduler slice", zap.Duration("slice", s))
	}
}
