package simgpu

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
)

// The CUDA state of a real process lives in its own memory, so a CRIU dump
// and restore carry it along. A simulated process's state lives in its
// registry record, keyed by a host pid that a restore changes; ExportProcess
// and ImportProcess carry the record across instead.

// exported is a record as ExportProcess gives it: with the uid its process
// ran as.
type exported struct {
	record
	UID *uint32 `json:"uid,omitempty"`
}

// ExportProcess returns the record of pid: its simulated memory and CUDA
// checkpoint state, and the uid it runs as.
func (r *Registry) ExportProcess(pid int) ([]byte, error) {
	var out []byte
	err := r.lockedOwner(pid, func(uid uint32) error {
		rec, owner, err := readRecord(r.recordPath(uid, pid))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && owner != uid) {
			return fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
		}
		if err != nil {
			return err
		}
		out, err = json.Marshal(exported{record: rec, UID: &uid})
		return err
	})
	return out, err
}

// ImportProcess stores an exported record as that of process (pid,
// startTime), in the directory of the user it ran as when exported: a
// process CRIU restores gets its credentials back only after the
// post-restore notification, where its state is carried in (a real
// process's CUDA state is in its memory by then). A record exported
// without a uid goes to the user pid runs as now. Its restore thread is
// found again by its tid in the process's PID namespace, which CRIU keeps
// while the host tid changes.
func (r *Registry) ImportProcess(pid int, startTime uint64, data []byte) error {
	var exp exported
	if err := json.Unmarshal(data, &exp); err != nil {
		return fmt.Errorf("process %d: exported record: %w", pid, err)
	}
	rec := exp.record
	if rec.Usage == nil {
		rec.Usage = map[string]uint64{}
	}
	if rec.Parked == nil {
		rec.Parked = map[string]uint64{}
	}
	rec.PID, rec.StartTime, rec.RestoreTID = pid, startTime, 0
	if rec.RestoreNSTID > 0 {
		tid, err := hostTID(pid, rec.RestoreNSTID)
		if err != nil {
			return fmt.Errorf("process %d: restore thread: %w", pid, err)
		}
		rec.RestoreTID = tid
	}
	if exp.UID != nil {
		return r.lockedUser(*exp.UID, func() error { return r.writeRecord(*exp.UID, rec) })
	}
	return r.lockedOwner(pid, func(uid uint32) error { return r.writeRecord(uid, rec) })
}
