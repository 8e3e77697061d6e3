package simgpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Allocate adds mib MiB on device uuid to the record of process
// (pid, startTime), which must be running. Under the lock it sums the live
// usage of the device (pruning stale records) and fails with an
// *OutOfMemoryError when the allocation does not fit in the device or past
// the process's own limit there (see SetLimit), or with ErrLocked while the
// process is locked or checkpointed.
func (r *Registry) Allocate(pid int, startTime uint64, uuid string, mib uint64) error {
	dev, err := r.device(uuid)
	if err != nil {
		return err
	}
	return r.lockedScan(pid, startTime, func(s scanResult) error {
		rec, ok := s.live[pid]
		if !ok {
			rec = newRecord(pid, startTime)
		}
		if err := rec.blocked(); err != nil {
			return err
		}
		free := freeMiB(dev, s.used(uuid))
		if limit, ok := rec.Limit[uuid]; ok && mib > limit-min(limit, rec.Usage[uuid]) {
			return &OutOfMemoryError{Device: dev, RequestedMiB: mib, FreeMiB: min(free, limit-min(limit, rec.Usage[uuid])), LimitMiB: limit}
		}
		if mib > free {
			return &OutOfMemoryError{Device: dev, RequestedMiB: mib, FreeMiB: free}
		}
		rec.Usage[uuid] += mib
		return r.writeRecord(rec)
	})
}

// Free returns mib MiB on device uuid from the record of process
// (pid, startTime). Freeing more than the process holds is an error, and so
// is freeing while the process is locked or checkpointed (ErrLocked).
func (r *Registry) Free(pid int, startTime uint64, uuid string, mib uint64) error {
	if _, err := r.device(uuid); err != nil {
		return err
	}
	return r.locked(func() error {
		rec, err := r.ownRecord(pid, startTime)
		if err != nil {
			return err
		}
		if err := rec.blocked(); err != nil {
			return err
		}
		if have := rec.Usage[uuid]; mib > have {
			return fmt.Errorf("process %d: free %d MiB on simulated GPU %s: only %d MiB allocated", pid, mib, uuid, have)
		}
		rec.Usage[uuid] -= mib
		return r.writeRecord(rec)
	})
}

// Release removes the record of process pid, freeing all its memory. A
// process without a record is not an error.
func (r *Registry) Release(pid int) error {
	return r.locked(func() error {
		err := os.Remove(r.recordPath(pid))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		return nil
	})
}

// Park moves all device memory of process (pid, startTime) to its parked
// memory, as a checkpoint moves GPU memory to host RAM.
func (r *Registry) Park(pid int, startTime uint64) error {
	return r.locked(func() error {
		rec, err := r.ownRecord(pid, startTime)
		if err != nil {
			return err
		}
		for uuid, n := range rec.Usage {
			rec.Parked[uuid] += n
		}
		rec.Usage = map[string]uint64{}
		return r.writeRecord(rec)
	})
}

// Unpark moves the parked memory of process (pid, startTime) back onto its
// devices, as a restore does. It moves all or nothing, and fails with an
// *OutOfMemoryError when a device lacks room.
func (r *Registry) Unpark(pid int, startTime uint64) error {
	return r.lockedScan(pid, startTime, func(s scanResult) error {
		rec, ok := s.live[pid]
		if !ok {
			return fmt.Errorf("process %d: no simulated GPU memory: %w", pid, ErrNoSuchProcess)
		}
		uuids := make([]string, 0, len(rec.Parked))
		for uuid := range rec.Parked {
			uuids = append(uuids, uuid)
		}
		sort.Strings(uuids)
		for _, uuid := range uuids {
			dev, err := r.device(uuid)
			if err != nil {
				return err
			}
			if free := freeMiB(dev, s.used(uuid)); rec.Parked[uuid] > free {
				return &OutOfMemoryError{Device: dev, RequestedMiB: rec.Parked[uuid], FreeMiB: free}
			}
		}
		for _, uuid := range uuids {
			rec.Usage[uuid] += rec.Parked[uuid]
		}
		rec.Parked = map[string]uint64{}
		return r.writeRecord(rec)
	})
}

// lockedScan runs fn under the directory lock with a fresh, cleaned scan,
// after checking that process (pid, startTime) is running.
func (r *Registry) lockedScan(pid int, startTime uint64, fn func(scanResult) error) error {
	return r.locked(func() error {
		if err := checkRunning(pid, startTime); err != nil {
			return err
		}
		s, err := r.scan()
		if err != nil {
			return err
		}
		r.removeGarbage(s)
		return fn(s)
	})
}

// checkRunning verifies that process (pid, startTime) is running.
func checkRunning(pid int, startTime uint64) error {
	st, err := readStat(pid)
	if err != nil {
		return err
	}
	if !procfs.SameStart(st.StartTime, startTime) || st.Exited() {
		return fmt.Errorf("process %d with start time %d: %w", pid, startTime, ErrNoSuchProcess)
	}
	return nil
}

// freeMiB is a device's free memory given its used memory.
func freeMiB(dev Device, used uint64) uint64 {
	if used >= dev.TotalMiB {
		return 0
	}
	return dev.TotalMiB - used
}
