package logbudget

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/gpusched/gpusched/internal/fairshare"
	"github.com/gpusched/gpusched/internal/logfile"
)

// Log is the log of one live process.
type Log struct {
	UID  uint32
	User string
	Name string // the process's
	Path string
}

// Report is what one pass did to one user's logs.
type Report struct {
	User    string
	Held    int64    // what the user's logs held before the cuts
	Over    string   // the setting they were cut to: Keeper.Setting or Keeper.TogetherSetting
	Budget  int64    // what they were cut to
	Removed []string // rotated copies removed, by path
	Emptied []string // processes whose logs were emptied, by name
	Err     error    // the first cut that failed; the others went on
}

// Keeper holds what each user's live logs hold on disk together to Budget,
// and what all users' hold together to Together, checking once per Every:
// between two checks processes can write past them by what they write in
// that time.
type Keeper struct {
	Budget  int64  // each user's (0: no cap)
	Keep    int    // rotated copies of each log (--log-keep)
	Setting string // the budget's name, for the line left in an emptied log
	// Together, when set, is what the live logs of all users may hold
	// together, read at each pass (0: no cap then). Past it each user is
	// cut to an equal share (fairshare.Level) where that is below Budget: those who
	// hold the most first, those within their share not at all.
	Together        func() int64
	TogetherSetting string
	Every           time.Duration
	Live            func() []Log // the logs held to the budget, every user's
	Reports         func(Report) // told of each user's cuts
}

// Run checks once per Every until ctx ends.
func (k Keeper) Run(ctx context.Context) {
	t := time.NewTicker(k.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.Pass()
		}
	}
}

// userLogs is one user's live logs in one pass: which of the pass's, and
// what they hold together.
type userLogs struct {
	user string
	logs []int
	held int64
}

// Pass reads the size of every live log and cuts each user's past their
// budget, or past their share of what all may hold together.
func (k Keeper) Pass() {
	logs := k.Live()
	byUser := map[uint32]*userLogs{}
	var copies []logfile.Copy
	for i, l := range logs {
		if !filepath.IsAbs(l.Path) { // never a path relative to the daemon's directory
			continue
		}
		u := byUser[l.UID]
		if u == nil {
			u = &userLogs{user: l.User}
			byUser[l.UID] = u
		}
		u.logs = append(u.logs, i)
		copies = logfile.AppendCopies(copies[:0], l.Path, k.Keep)
		for _, c := range copies {
			u.held += c.Bytes
		}
	}
	budget := k.Budget
	if budget <= 0 {
		budget = math.MaxInt64
	}
	level, together, all := k.level(budget, byUser)
	for _, u := range byUser {
		switch {
		case u.held > level && level < budget:
			note := fmt.Sprintf("gpusched: this log was emptied: the logs of all users' live processes held %d bytes, over the daemon's %s (%d); %s's held %d, cut to their share (%d)\n",
				all, k.TogetherSetting, together, u.user, u.held, level)
			k.cut(u, logs, Report{User: u.user, Held: u.held, Over: k.TogetherSetting, Budget: level}, note)
		case u.held > budget:
			note := fmt.Sprintf("gpusched: this log was emptied: the logs of %s's live processes held %d bytes, over the daemon's %s (%d)\n",
				u.user, u.held, k.Setting, budget)
			k.cut(u, logs, Report{User: u.user, Held: u.held, Over: k.Setting, Budget: budget}, note)
		}
	}
}

// level is each user's share of what all may hold together (fairshare.Level of what
// each will hold within budget), what that is, and what all hold now:
// math.MaxInt64 as the share where there is no cap or all are within it.
func (k Keeper) level(budget int64, byUser map[uint32]*userLogs) (level, together, all int64) {
	if k.Together == nil {
		return math.MaxInt64, 0, 0
	}
	if together = k.Together(); together <= 0 {
		return math.MaxInt64, 0, 0
	}
	held := make([]int64, 0, len(byUser))
	for _, u := range byUser {
		held = append(held, min(u.held, budget))
		all += u.held
	}
	return fairshare.Level(together, held), together, all
}

// cut removes or empties what Select picks of u's files (read again: a
// cut is rare, and a pass keeps only sizes) to bring them within r.Budget,
// each emptied log left note, and reports it.
func (k Keeper) cut(u *userLogs, logs []Log, r Report, note string) {
	var files []File
	for _, i := range u.logs {
		for _, c := range logfile.AppendCopies(nil, logs[i].Path, k.Keep) {
			files = append(files, File{Path: c.Path, Current: c.Index == 0, Bytes: c.Bytes, Mod: c.Mod, log: i})
		}
	}
	for _, f := range Select(r.Budget, files) {
		var err error
		if f.Current {
			if err = logfile.Empty(f.Path, note); err == nil {
				r.Emptied = append(r.Emptied, logs[f.log].Name)
			}
		} else if err = os.Remove(f.Path); err == nil {
			r.Removed = append(r.Removed, f.Path)
		}
		if r.Err == nil {
			r.Err = err
		}
	}
	k.Reports(r)
}
