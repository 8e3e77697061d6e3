package daemon

import (
	"os"

	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// rm forgets an exited process: its record, status file and logs.
func (d *Daemon) rm(c *call) (any, error) {
	var p api.NameParams
	if err := c.decode(&p); err != nil {
		return nil, err
	}
	if r, err := d.lookup(c, p.Name); err != nil {
		return nil, err
	} else if r.Live() {
		return nil, conflictf("process %q is %s; kill it before rm", p.Name, r.State)
	}
	// Under the name's op lock, so that the logs removed below cannot be
	// those of a process that takes the name meanwhile.
	unlock, err := d.ops.lock(c.ctx, p.Name)
	if err != nil {
		return nil, err
	}
	defer unlock()
	gv := d.gpuView()
	rec, err := d.table.Remove(p.Name, func(r proctable.Record) error {
		if !c.actor.owns(r.Owner.UID) {
			return deniedf("process %q belongs to %s", p.Name, r.Owner.User)
		}
		if r.Live() {
			return conflictf("process %q is %s; kill it before rm", p.Name, r.State)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	os.Remove(rec.StatusPath)
	d.removeLogs(rec.LogPath)
	d.removeSandboxHome(rec.ID)
	return toAPI(rec, gv), nil
}
