package daemon

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// snapshots lists the caller's snapshots (root: everyone's).
func (d *Daemon) snapshots(c *call) (any, error) {
	var p api.SnapshotsParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	filter, err := parseNameFilter(p.Name)
	if err != nil {
		return nil, invalidf("snapshots: %v", err)
	}
	holding := d.holding()
	out := api.SnapshotsResult{Snapshots: []api.Snapshot{}, Bytes: d.snaps.Bytes(), Budget: d.cfg.DiskBudgetMiB << 20}
	for _, m := range d.snaps.List() {
		if !c.actor.owns(m.UID) || !filter.match(m.Name, m.UID, m.User) {
			continue
		}
		out.Snapshots = append(out.Snapshots, snapshotToAPI(m, holding[m.ID]))
	}
	return out, nil
}

func snapshotToAPI(m checkpoint.SnapshotMeta, holds bool) api.Snapshot {
	gpus := m.GPUs
	if gpus == nil {
		gpus = []string{}
	}
	var vram uint64
	for _, mib := range m.VRAM {
		vram += mib
	}
	return api.Snapshot{ID: m.ID, Name: m.Name, ProcessID: m.ProcessID, User: m.User, UID: m.UID, Parent: m.Parent,
		Holds: holds, Bytes: m.Bytes, Written: m.Written, GPUs: gpus, VRAMMiB: vram, CreatedAt: m.CreatedAt, LastUsedAt: m.LastUsed}
}

// holding marks the snapshots a process on disk lives in: its own and
// their ancestors.
func (d *Daemon) holding() map[string]bool {
	out := map[string]bool{}
	for _, r := range d.table.View().Records {
		if onDisk(r.State) && r.Snapshot != "" {
			for _, id := range d.snaps.Chain(r.Snapshot) {
				out[id] = true
			}
		}
	}
	return out
}

// onDisk reports whether a process in state s lives in its snapshot.
func onDisk(s api.State) bool {
	return s == api.StateHibernated || s == api.StateHibernating || s == api.StateRestoring
}

// deleteSnapshot removes one snapshot nothing needs.
func (d *Daemon) deleteSnapshot(c *call) (any, error) {
	var p api.DeleteSnapshotParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if err := uuid.Validate(p.ID); err != nil {
		return nil, invalidf("delete_snapshot: id %q is not a snapshot id", p.ID)
	}
	m, ok := d.snaps.Get(p.ID)
	if !ok {
		return nil, api.Errorf(api.CodeNotFound, "snapshot %s not found", p.ID)
	}
	if !c.actor.owns(m.UID) {
		return nil, deniedf("snapshot %s belongs to %s", p.ID, m.User)
	}
	unlock, err := d.ops.lock(c.ctx, proctable.Key{UID: m.UID, Name: m.Name})
	if err != nil {
		return nil, err
	}
	defer unlock()
	if d.holding()[p.ID] {
		return nil, conflictf("snapshot %s holds the hibernated process %q: thaw or kill it first", p.ID, m.Name)
	}
	if err := d.snaps.Delete(p.ID); err != nil {
		if errors.Is(err, checkpoint.ErrSnapshotInUse) {
			return nil, conflictf("%v: delete that one first", err)
		}
		return nil, err
	}
	for _, r := range d.table.View().Records {
		if r.Snapshot == p.ID {
			_, _ = d.table.Update(r.Key(), func(x *proctable.Record) error {
				if x.ID == r.ID && x.Snapshot == p.ID {
					x.Snapshot = ""
				}
				return nil
			})
		}
	}
	return snapshotToAPI(m, false), nil
}

// settleHibernating decides, after a restart, where a hibernate cut short
// left a process: on disk when CRIU completed the image, else still in
// memory when the dump never finished, else lost with the incomplete
// image. A complete image wins over a live tree: CRIU writes it whole only
// after it left the tree stopped, and the hibernate kills that tree next;
// with the record's pids cleared, the sweep of untracked trees ends it.
func (d *Daemon) settleHibernating(rec proctable.Record) {
	log := d.log.With(zap.String("name", rec.Name), zap.String("snapshot", rec.Snapshot))
	id := rec.Snapshot
	if completeImage(d.snaps.Path(id)) && d.keepInterruptedImage(rec, log) {
		return
	}
	if rec.BootID == d.bootID && rec.InitPID != 0 && procfs.Alive(rec.InitPID, rec.InitStart) {
		d.discard(id)
		if _, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
			r.State, r.Snapshot = api.StateFrozen, ""
			r.Error = "the daemon restarted during a hibernate; the process stayed in RAM"
			return nil
		}); err != nil {
			log.Error("settle an interrupted hibernate", zap.Error(err))
		}
		return
	}
	d.discard(id)
	d.markExited(rec, api.Exit{Unknown: true, Reason: "lost: the daemon stopped during its hibernate and the image is incomplete"}, log)
}

// keepInterruptedImage commits the complete image of an interrupted
// hibernate and records the process hibernated in it.
func (d *Daemon) keepInterruptedImage(rec proctable.Record, log *zap.Logger) bool {
	id := rec.Snapshot
	m := checkpoint.SnapshotMeta{ID: id, Name: rec.Name, ProcessID: rec.ID, UID: rec.Owner.UID, User: rec.Owner.User,
		GPUs: rec.GPUs, VRAM: rec.Checkpoint.VRAM(), CreatedAt: rec.Checkpoint.FrozenAt}
	if link, err := os.Readlink(filepath.Join(d.snaps.Path(id), "parent")); err == nil {
		m.Parent = filepath.Base(link) // the page server links "../<parent id>"
	}
	if _, err := d.snaps.Commit(m); err != nil {
		log.Error("commit the image of an interrupted hibernate", zap.Error(err))
		return false
	}
	if _, err := d.table.Update(rec.Key(), func(r *proctable.Record) error {
		r.State, r.InitPID, r.InitStart, r.PID, r.PIDStart = api.StateHibernated, 0, 0, 0, 0
		r.Checkpoint.Stopped = nil
		r.Error = "the daemon restarted during a hibernate; the image was complete"
		return nil
	}); err != nil {
		log.Error("settle an interrupted hibernate", zap.Error(err))
		return false
	}
	log.Warn("kept the image of an interrupted hibernate")
	return true
}

// completeImage reports whether CRIU finished dumping into dir: it writes
// its dump statistics last.
func completeImage(dir string) bool {
	for _, f := range []string{"inventory.img", "stats-dump"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return false
		}
	}
	return true
}

// discardIncomplete removes snapshot directories left without metadata
// that no process claims: partial images of dumps that failed with the
// daemon.
func (d *Daemon) discardIncomplete() {
	claimed := map[string]bool{}
	for _, r := range d.table.View().Records {
		if r.Live() && r.Snapshot != "" {
			claimed[r.Snapshot] = true
		}
	}
	for _, id := range d.incomplete {
		if _, ok := d.snaps.Get(id); ok || claimed[id] {
			continue
		}
		d.log.Warn("removing an incomplete snapshot", zap.String("snapshot", id))
		d.discard(id)
	}
	d.incomplete = nil
}
