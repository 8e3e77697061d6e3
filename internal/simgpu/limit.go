package simgpu

import (
	"errors"
	"io/fs"
)

// SetLimit caps the memory process (pid, startTime), which must be running,
// may hold on device uuid at mib MiB, as NVIDIA MPS enforces a client's
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: an Allocate that would take its usage
// there past the limit fails with an *OutOfMemoryError whose LimitMiB is
// set, however much the device has free. A limit of 0 removes the cap. What
// the process already holds is kept, even above a new limit.
func (r *Registry) SetLimit(pid int, startTime uint64, uuid string, mib uint64) error {
	if _, err := r.device(uuid); err != nil {
		return err
	}
	return r.lockedScan(pid, startTime, func(uid uint32, s scanResult) error {
		rec, ok := s.live[pid]
		if !ok {
			rec = newRecord(pid, startTime)
		}
		if mib == 0 {
			delete(rec.Limit, uuid)
		} else {
			if rec.Limit == nil {
				rec.Limit = map[string]uint64{}
			}
			rec.Limit[uuid] = mib
		}
		return r.writeRecord(uid, rec)
	})
}

// Limits returns the per-device limits of process pid set by SetLimit
// (none for a process without a record).
func (r *Registry) Limits(pid int) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := r.lockedOwner(pid, func(uid uint32) error {
		rec, owner, err := readRecord(r.recordPath(uid, pid))
		if errors.Is(err, fs.ErrNotExist) || (err == nil && owner != uid) {
			return nil
		}
		if err != nil {
			return err
		}
		for uuid, mib := range rec.Limit {
			out[uuid] = mib
		}
		return nil
	})
	return out, err
}
