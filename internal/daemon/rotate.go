package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/logfile"
)

// logCheckInterval is how often live processes' logs are held to the cap.
const logCheckInterval = 5 * time.Second

// rotateLogs keeps every live process's log under --log-max-bytes by
// copy-truncate, which the process's O_APPEND descriptor survives.
func (d *Daemon) rotateLogs(ctx context.Context) {
	t := time.NewTicker(logCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.enforceLogCaps()
	}
}

// enforceLogCaps rotates every live process's log that passed the cap.
func (d *Daemon) enforceLogCaps() {
	for _, r := range d.table.View().Records {
		if !r.Live() {
			continue
		}
		if rotated, err := logfile.Enforce(r.LogPath, d.cfg.LogMaxBytes, d.cfg.LogKeep); err != nil {
			d.log.Warn("log rotation", zap.String("name", r.Name), zap.Error(err))
		} else if rotated {
			d.log.Debug("log rotated", zap.String("name", r.Name))
		}
	}
}
