package daemon

import (
	"path/filepath"
	"strconv"

	"github.com/gpusched/gpusched/internal/jobqueue"
	"github.com/gpusched/gpusched/internal/proctable"
	"github.com/gpusched/gpusched/pkg/api"
)

// claimName checks that a new process may take its key: no live process
// of its owner holds that name (an exited one's record and logs start
// then replaces). Callers hold the key's op lock, under which no other
// record of that key can appear.
func (d *Daemon) claimName(k proctable.Key) error {
	if old, ok := d.table.Get(k); ok && old.Live() {
		return api.Errorf(api.CodeExists, "process %q is already %s (pid %d); kill it or choose another name", k.Name, old.State, old.PID)
	}
	return nil
}

// jobProcKey is the key of j's process: the job's name, its owner's.
func jobProcKey(j *jobqueue.Job) proctable.Key {
	return proctable.Key{UID: j.Owner.UID, Name: j.Name}
}

// logPath is where a new process of k logs: NAME.log for root's,
// NAME@UID.log for another user's. '@' is in no name, so no two keys share
// a file; nor does root's with a record of an earlier version, which kept
// every user's log as NAME.log (root's then takes NAME@0.log).
func (d *Daemon) logPath(k proctable.Key) string {
	plain := filepath.Join(d.cfg.LogDir, k.Name+".log")
	if k.UID != 0 {
		return filepath.Join(d.cfg.LogDir, k.Name+"@"+strconv.FormatUint(uint64(k.UID), 10)+".log")
	}
	for _, r := range d.table.View().Named(k.Name) {
		if r.Key() != k && r.LogPath == plain {
			return filepath.Join(d.cfg.LogDir, k.Name+"@0.log")
		}
	}
	return plain
}
