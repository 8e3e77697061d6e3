package router

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/pkg/api"
)

// armIdle schedules m's idle freeze, cfg.TTL after its last request.
// Callers hold r.mu.
func (r *Router) armIdle(m *model) {
	if m.cfg.TTL <= 0 {
		return
	}
	if m.idle != nil {
		m.idle.Stop()
	}
	m.idle = time.AfterFunc(m.cfg.TTL, func() {
		if err := r.unload(r.ctx, m, false); err != nil {
			r.log.Warn("idle freeze", zapModel(m), zap.Error(err))
		}
	})
}

// errBusy is an unload of a model that requests use or a wake holds.
type errBusy struct {
	name     string
	inflight int
}

func (e errBusy) Error() string {
	if e.inflight == 0 {
		return fmt.Sprintf("model %q is waking; nothing frozen", e.name)
	}
	return fmt.Sprintf("model %q has %s in flight; nothing frozen", e.name, api.Plural(e.inflight, "request", "requests"))
}

// unload freezes m when nothing uses it. An idle unload (force false)
// also skips m when it was used within its TTL (the timer raced a
// request). It reports whether it froze m; a model that is not running
// is left as it is.
func (r *Router) unload(ctx context.Context, m *model, force bool) error {
	r.mu.Lock()
	if force && m.hold != nil && m.lingering != nil && m.inflight == 0 && m.waiting == 0 {
		h := r.letGo(m) // an idle hold lingering: not a use
		r.mu.Unlock()
		r.closeHold(m, h)
		r.mu.Lock()
	}
	switch {
	case m.hold != nil || m.wake != nil || m.inflight > 0 || m.freezing:
		r.mu.Unlock()
		if !force {
			return nil
		}
		return errBusy{m.cfg.Name, m.inflight}
	case !force && time.Since(m.lastUsed) < m.cfg.TTL:
		r.mu.Unlock()
		return nil
	}
	m.idle = nil
	m.freezing = true // no wake starts until the freeze is done
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		m.freezing = false
		r.broadcast()
		r.mu.Unlock()
	}()
	p, err := r.d.Process(ctx, m.cfg.Name)
	if api.IsNotFound(err) || err == nil && p.State != api.StateRunning {
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.d.Freeze(ctx, m.cfg.Name); err != nil && !api.IsConflict(err) {
		return fmt.Errorf("freeze model %q: %w", m.cfg.Name, err)
	}
	r.metrics.unloads.WithLabelValues(m.cfg.Name).Inc()
	r.log.Info("frozen", zapModel(m), zap.Bool("idle", !force))
	return nil
}
