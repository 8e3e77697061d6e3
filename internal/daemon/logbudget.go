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
	if l.LogMiBPerUser == 0 && l.LogDiskFraction == 0 && l.LogKeepFree == 0 {
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
	if l.LogDiskFraction > 0 || l.LogKeepFree > 0 {
		k.Together = d.liveLogsRoom(l.LogDiskFraction, l.LogKeepFree)
	}
	k.Run(ctx)
}

// liveLogsRoom is what the live logs of all users may hold together, given
// what they hold, and the setting that says so: fraction of the log
// directory's filesystem (--log-disk-fraction; 0: no cap), and, where less
// than keepFree of it is free to users (--log-keep-free), what they hold
// less the shortfall. Within their fractions the logs filled a filesystem
// shared with the state directory, and every user's run and submit failed
// (a red-team pass, 2026-11-29).
func (d *Daemon) liveLogsRoom(fraction, keepFree float64) func(held int64) (int64, string) {
	share := func() int64 { return 0 }
	if fraction > 0 {
		share = d.logDirShare(fraction, "--log-disk-fraction")
	}
	return func(held int64) (int64, string) {
		room, setting := share(), "--log-disk-fraction"
		var st unix.Statfs_t
		if keepFree <= 0 || unix.Statfs(d.cfg.LogDir, &st) != nil {
			return room, setting
		}
		short := int64(keepFree*float64(st.Blocks)*float64(st.Frsize)) - int64(st.Bavail)*st.Frsize
		if floor := max(held-short, 1); short > 0 && (room <= 0 || floor < room) {
			return floor, "--log-keep-free"
		}
		return room, setting
	}
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
