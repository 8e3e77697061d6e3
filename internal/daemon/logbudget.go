package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/logbudget"
)

// logBudgetEvery is how often the logs of users' live processes are
// measured against --max-log-bytes-per-user and --log-disk-fraction.
const logBudgetEvery = time.Second

// runLogBudget holds what the logs of each non-root user's live processes
// hold on disk together to --max-log-bytes-per-user, and what all users'
// hold together to --log-disk-fraction of the log directory's filesystem,
// until ctx ends. Root's are the operator's, held only by --log-max-bytes.
func (d *Daemon) runLogBudget(ctx context.Context) {
	l := d.cfg.Limits
	if l.LogMiBPerUser == 0 && l.LogDiskFraction == 0 {
		return
	}
	k := logbudget.Keeper{
		Budget:  int64(l.LogMiBPerUser) << 20,
		Keep:    d.cfg.LogKeep,
		Setting: "--max-log-bytes-per-user",
		Every:   logBudgetEvery,
		Live:    d.usersLiveLogs,
		Reports: func(r logbudget.Report) {
			d.log.Warn("cut the logs of a user's live processes, over "+r.Over,
				zap.String("user", r.User), zap.Int64("held", r.Held), zap.Int64("cut_to", r.Budget),
				zap.Int("rotated_copies_removed", len(r.Removed)), zap.Strings("emptied", r.Emptied), zap.Error(r.Err))
		},
	}
	if l.LogDiskFraction > 0 {
		k.Together = d.logDirShare(l.LogDiskFraction, "--log-disk-fraction")
		k.TogetherSetting = "--log-disk-fraction"
	}
	k.Run(ctx)
}

// logDirShare reads, at each call, fraction of the log directory's
// filesystem (its size), as setting lets logs hold it: 0 (no cap this
// time) where its size cannot be read, which it warns of once until it
// can be again. Each call of it is one caller's.
func (d *Daemon) logDirShare(fraction float64, setting string) func() int64 {
	failing := false
	return func() int64 {
		var st unix.Statfs_t
		err := unix.Statfs(d.cfg.LogDir, &st)
		if err != nil && !failing {
			d.log.Warn(setting+": the size of the log directory's filesystem cannot be read; not held to it until it can", zap.Error(err))
		}
		if failing = err != nil; failing {
			return 0
		}
		return int64(float64(st.Blocks) * float64(st.Frsize) * fraction)
	}
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
