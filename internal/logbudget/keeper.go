package logbudget

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

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
	Removed []string // rotated copies removed, by path
	Emptied []string // processes whose logs were emptied, by name
	Err     error    // the first cut that failed; the others went on
}

// Keeper holds what each user's live logs hold on disk together to Budget,
// checking once per Every: between two checks a user's processes can write
// past it by what they write in that time.
type Keeper struct {
	Budget  int64
	Keep    int    // rotated copies of each log (--log-keep)
	Setting string // the budget's name, for the line left in an emptied log
	Every   time.Duration
	Live    func() []Log // the logs held to the budget, every user's
	Reports func(Report) // told of each user's cuts
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

// Pass reads the size of every live log and cuts each user's past the
// budget.
func (k Keeper) Pass() {
	logs := k.Live()
	byUser := map[uint32][]int{}
	for i, l := range logs {
		if filepath.IsAbs(l.Path) { // never a path relative to the daemon's directory
			byUser[l.UID] = append(byUser[l.UID], i)
		}
	}
	var copies []logfile.Copy
	var files []File
	for _, mine := range byUser {
		files = files[:0]
		var held int64
		for _, i := range mine {
			copies = logfile.AppendCopies(copies[:0], logs[i].Path, k.Keep)
			for _, c := range copies {
				files = append(files, File{Path: c.Path, Current: c.Index == 0, Bytes: c.Bytes, Mod: c.Mod, log: i})
				held += c.Bytes
			}
		}
		if held > k.Budget {
			k.cut(logs[mine[0]].User, held, logs, Select(k.Budget, files))
		}
	}
}

// cut removes or empties each of files, one user's, and reports it.
func (k Keeper) cut(user string, held int64, logs []Log, files []File) {
	r := Report{User: user, Held: held}
	note := fmt.Sprintf("gpusched: this log was emptied: the logs of %s's live processes held %d bytes, over the daemon's %s (%d)\n",
		user, held, k.Setting, k.Budget)
	for _, f := range files {
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
