package daemon

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/config"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// cpuGroups is what the daemon needs from the cgroup manager: a cgroup v2
// cgroup per managed tree, named by its record id, whose cpu.weight
// follows the tree's nice.
type cpuGroups interface {
	Place(id string, pid, nice int) error
	SetWeight(id string, nice int) error
	Remove(id string) error
	Close() error
}

// cpuPriority is the daemon's side of CPU priority beyond nice. Priority is
// best effort: a tree that cannot be placed runs with its nice alone, and
// the daemon log says why.
type cpuPriority struct {
	groups cpuGroups       // nil when cpu.weight is not managed
	why    string          // why groups is nil
	found  *cgroup.Manager // detected by New, set up at boot
	opts   []cgroup.Option // extra Detect options (tests)
}

// withCgroupOptions passes options to cgroup.Detect (tests: plain
// directories standing in for cgroupfs).
func withCgroupOptions(opts ...cgroup.Option) Option {
	return func(d *Daemon) { d.cpu.opts = append(d.cpu.opts, opts...) }
}

// detectCPU finds, without changing anything, where the trees' cgroups go.
func (d *Daemon) detectCPU() {
	if d.cfg.CgroupRoot == config.CgroupNone {
		d.cpu.why = "turned off by --cgroup-root none"
		return
	}
	m, err := cgroup.Detect(d.cfg.CgroupRoot, d.cpu.opts...)
	if err != nil {
		d.cpu.why = err.Error()
		return
	}
	d.cpu.found = m
}

// setupCPU makes the detected layout usable and removes the empty cgroups
// of trees that ended while no daemon watched them. It runs at boot,
// before any tree is adopted or started, and logs the outcome once.
func (d *Daemon) setupCPU() {
	m := d.cpu.found
	if m == nil {
		d.log.Info("cpu.weight not managed; only nice applies", zap.String("reason", d.cpu.why))
		return
	}
	if err := m.Setup(); err != nil {
		d.cpu.why = err.Error()
		d.log.Warn("cpu.weight not managed; only nice applies", zap.String("cgroup", m.Parent()), zap.Error(err))
		return
	}
	live := map[string]bool{}
	for _, r := range d.table.View().Records {
		live[r.ID] = true
	}
	removed, err := m.Prune(func(id string) bool { return live[id] })
	if err != nil {
		d.log.Warn("remove leftover cgroups", zap.String("cgroup", m.Parent()), zap.Error(err))
	}
	d.cpu.groups = m
	d.log.Info("cpu.weight follows nice", zap.String("cgroup", m.Parent()), zap.Int("leftovers_removed", len(removed)))
}

// closeCPU hands back what setupCPU took, once nothing is watched.
func (d *Daemon) closeCPU() {
	if d.cpu.groups == nil {
		return
	}
	if err := d.cpu.groups.Close(); err != nil {
		d.log.Warn("release the cpu controller", zap.Error(err))
	}
}

// cpuCaps is the hello capability of cpu.weight, when it is managed.
func (d *Daemon) cpuCaps() []string {
	if d.cpu.groups == nil {
		return nil
	}
	return []string{api.CapCPUWeight}
}

// placeInit puts a new tree's init in its cgroup. It runs in the spawn
// handshake before the command starts, so the whole tree is born there.
// Only a tree bound for its owner's cgroup fails to start if it cannot go
// there (see placeUserInit).
func (d *Daemon) placeInit(rec proctable.Record, initPID int) error {
	if rec.Cgroup != "" {
		return d.placeUserInit(rec, initPID)
	}
	if d.trees != nil {
		if err := d.trees.Refresh(); err != nil {
			d.log.Warn("the managed trees' pids.max not set again", zap.Error(err))
		}
		if err := d.trees.Place(initPID, rec.Owner.UID); err != nil {
			return fmt.Errorf("run %q: the managed trees' pids cgroup: %w", rec.Name, err)
		}
	}
	if d.cpu.groups == nil {
		return nil
	}
	if err := d.cpu.groups.Place(rec.ID, initPID, rec.Nice); err != nil {
		d.log.Warn("cpu.weight not applied; nice still applies", zap.String("name", rec.Name), zap.String("id", rec.ID),
			zap.Int("init_pid", initPID), zap.Error(err))
	}
	return nil
}

// placeTree puts every process of a tree that already runs (restored by
// CRIU into the daemon's own cgroup, or adopted) in the tree's cgroups,
// the init first: its owner's (best effort: the tree already runs), or
// the trees' pids cgroup and the one for cpu.weight.
func (d *Daemon) placeTree(rec proctable.Record, procs []proctable.ProcRef) {
	if rec.Cgroup != "" && d.users != nil {
		d.placeEach(rec, procs, func(pid int) error { return d.users.Place(rec.Cgroup, pid, rec.Nice) },
			"the tree is not wholly in its user's cgroup; the rest stays in the daemon's")
		return
	}
	if d.trees != nil {
		d.placeEach(rec, procs, func(pid int) error { return d.trees.Place(pid, rec.Owner.UID) }, "the tree is not wholly in the managed trees' pids cgroup; the rest may take the tasks kept for the daemon")
	}
	if d.cpu.groups != nil {
		d.placeEach(rec, procs, func(pid int) error { return d.cpu.groups.Place(rec.ID, pid, rec.Nice) },
			"cpu.weight not applied to the whole tree; nice still applies")
	}
}

// placeEach places each live process of procs, and logs what failed.
func (d *Daemon) placeEach(rec proctable.Record, procs []proctable.ProcRef, place func(pid int) error, failed string) {
	var errs []error
	for _, p := range procs {
		if !procfs.Alive(p.PID, p.Start) {
			continue
		}
		if err := place(p.PID); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		d.log.Warn(failed, zap.String("name", rec.Name), zap.String("id", rec.ID), zap.String("cgroup", rec.Cgroup), zap.Error(err))
	}
}

// adoptCPU sets the weight of a live tree found at boot again (a daemon
// that moved itself hands the cpu controller back when it stops), and
// places a tree that has no cgroup yet, as one started before cpu.weight
// was managed.
func (d *Daemon) adoptCPU(rec proctable.Record) {
	if d.cpu.groups == nil || rec.InitPID <= 0 || rec.Cgroup != "" {
		return
	}
	err := d.cpu.groups.SetWeight(rec.ID, rec.Nice)
	if !errors.Is(err, cgroup.ErrNotFound) {
		if err != nil {
			d.log.Warn("cpu.weight not applied; nice still applies", zap.String("name", rec.Name), zap.String("id", rec.ID), zap.Error(err))
		}
		return
	}
	tree, err := procfs.ScanTree()
	if err != nil {
		d.log.Warn("cpu.weight not applied; nice still applies", zap.String("name", rec.Name), zap.Error(err))
		return
	}
	procs := []proctable.ProcRef{{PID: rec.InitPID, Start: rec.InitStart}}
	for _, pid := range tree.Descendants(rec.InitPID) {
		if start, err := procfs.StartTime(pid); err == nil {
			procs = append(procs, proctable.ProcRef{PID: pid, Start: start})
		}
	}
	d.placeTree(rec, procs)
}

// removeDumpedCPU deletes the cgroup of rt's ended tree, which was dumped,
// unless a restore of its record has taken the cgroup over already
// (adoptRestored, under procs.handover).
func (d *Daemon) removeDumpedCPU(rec proctable.Record, rt *procRuntime) {
	d.procs.handover.Lock()
	defer d.procs.handover.Unlock()
	if next := d.procs.get(rec.ID); next != nil && next != rt {
		if cur, ok := d.table.Get(rec.Key()); ok && cur.ID == rec.ID && cur.Cgroup == rec.Cgroup {
			return
		}
	}
	d.removeCPU(rec)
}

// removeCPU deletes an ended tree's cgroup. The kernel has emptied it by
// the time the init's pidfd reports the exit: the init of a PID namespace
// exits only after every other process in it.
func (d *Daemon) removeCPU(rec proctable.Record) {
	remove := func() error { return d.cpu.groups.Remove(rec.ID) }
	switch {
	case rec.Cgroup != "" && d.users != nil:
		remove = func() error { return d.users.Remove(rec.Cgroup) }
	case d.cpu.groups == nil:
		return
	}
	if err := remove(); err != nil {
		d.log.Warn("remove an ended tree's cgroup", zap.String("name", rec.Name), zap.String("id", rec.ID), zap.Error(err))
	}
}
