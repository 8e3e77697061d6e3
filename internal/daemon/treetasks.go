package daemon

import (
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/internal/taskreserve"
)

// treeTasks keeps the managed trees that run in the daemon's cgroups from
// taking the tasks it keeps for itself (--daemon-tasks): the Go runtime
// aborts when it cannot start a thread, and a tree outlives the daemon.
type treeTasks interface {
	Refresh() error                  // the trees' limit again, from what the daemon's cgroup may hold now
	Place(pid int, uid uint32) error // with uid's trees
	Join(uid uint32) string          // where a restore's CRIU runs so that uid's tree is born with their trees; "": nowhere
}

// setupTreeTasks finds and sets up the trees' pids cgroup, once cpu.weight
// is set up: on cgroup v2 it is the parent of the trees' own cgroups, on
// cgroup v1 a cgroup below the daemon's in the pids hierarchy. Where there
// is none the daemon runs without the reserve, and says why once.
func (d *Daemon) setupTreeTasks() {
	if d.cfg.DaemonTasks == 0 {
		d.log.Info("no tasks kept for the daemon from its trees", zap.String("reason", "turned off by --daemon-tasks 0"))
		return
	}
	parent := ""
	if d.cpu.groups != nil {
		if err := d.cpu.found.EnablePids(); err != nil {
			d.log.Warn("no tasks kept for the daemon from its trees", zap.Error(err))
			return
		}
		parent = d.cpu.found.Parent()
	}
	r, err := taskreserve.Detect(d.cfg.DaemonTasks, parent, taskreserve.HostPaths())
	if err == nil {
		r.ShareByUser(d.cfg.Limits.TasksFraction)
		err = r.Setup()
	}
	if err != nil {
		d.log.Warn("no tasks kept for the daemon from its trees", zap.Error(err))
		return
	}
	d.trees = r
	d.log.Info("tasks kept for the daemon from its trees", zap.String("cgroup", r.Dir()),
		zap.Int64("trees_max", r.Max()), zap.Int64("limit", r.Limit()))
}

// restoreWithTrees has the CRIU that restores rec's tree run where that
// tree is born with the trees, where it will run in the daemon's cgroups:
// a tree of thousands of processes restored into the daemon's own
// cgroup could take the tasks kept for the daemon before it is moved.
func (d *Daemon) restoreWithTrees(rec proctable.Record, place *criuPlace) {
	if d.trees == nil || d.userCgroupOf(rec.Owner, rec.ID) != "" {
		return
	}
	if dir := d.trees.Join(rec.Owner.UID); dir != "" {
		place.dirs = append(place.dirs, dir)
	}
}
