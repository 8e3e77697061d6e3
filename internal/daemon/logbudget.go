package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/logbudget"
)

// logBudgetEvery is how often the logs of users' live processes are
// measured against --max-log-bytes-per-user.
const logBudgetEvery = time.Second

// runLogBudget holds what the logs of each non-root user's live processes
// hold on disk together to --max-log-bytes-per-user, until ctx ends. Root's
// are the operator's, held only by --log-max-bytes.
func (d *Daemon) runLogBudget(ctx context.Context) {
	if d.cfg.Limits.LogMiBPerUser == 0 {
		return
	}
	logbudget.Keeper{
		Budget:  int64(d.cfg.Limits.LogMiBPerUser) << 20,
		Keep:    d.cfg.LogKeep,
		Setting: "--max-log-bytes-per-user",
		Every:   logBudgetEvery,
		Live:    d.usersLiveLogs,
		Reports: func(r logbudget.Report) {
			d.log.Warn("cut the logs of a user's live processes, over --max-log-bytes-per-user",
				zap.String("user", r.User), zap.Int64("held", r.Held), zap.Int("rotated_copies_removed", len(r.Removed)),
				zap.Strings("emptied", r.Emptied), zap.Error(r.Err))
		},
	}.Run(ctx)
}

// usersLiveLogs lists the logs of non-root users' live processes.
func (d *Daemon) usersLiveLogs() []logbudget.Log {
	var out []logbudget.Log
	for _, r := range d.table.View().Records {
		if r.Live() && r.Owner.UID != 0 {
			out = append(out, logbudget.Log{UID: r.Owner.UID, User: r.Owner.User, Name: r.Name, Path: r.LogPath})
		}
	}
	return out
}
