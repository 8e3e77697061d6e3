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
// (pid, startTime), which must be running. Under its owner's lock it sums
// the live usage of the device (pruning the owner's stale records) and
// fails with an *OutOfMemoryError when the allocation does not fit in the
// device or past the process's own limit there (see SetLimit), or with
// ErrLocked while the process is locked or checkpointed. A process that
// allocates for itself gets its CUDA restore thread then, as cuInit starts
// it (see restorethread.go).
func (r *Registry) Allocate(pid int, startTime uint64, uuid string, mib uint64) error {
	dev, err := r.device(uuid)
	if err != nil {
		return err
	}
	return r.lockedScan(pid, startTime, func(uid uint32, s scanResult) error {
		old, ok := s.live[pid]
		if !ok {
			old = newRecord(pid, startTime)
		}
		if err := old.blocked(); err != nil {
			return err
		}
		if old.RestoreNSTID == 0 {
			// Once: the process's own reads of /proc must not be open when
			// CRIU dumps it (a restore could not reopen them), and a CRIU
			// restore finds the thread again itself (ImportProcess).
			tid, nsTID, err := ownRestoreThread(pid)
			if err != nil {
				return err
			}
			old.RestoreTID, old.RestoreNSTID = tid, nsTID
		}
		free := freeMiB(dev, s.used(uuid))
		if limit, ok := old.Limit[uuid]; ok && mib > limit-min(limit, old.Usage[uuid]) {
			return &OutOfMemoryError{Device: dev, RequestedMiB: mib, FreeMiB: min(free, limit-min(limit, old.Usage[uuid])), LimitMiB: limit}
		}
		if mib > free {
			return &OutOfMemoryError{Device: dev, RequestedMiB: mib, FreeMiB: free}
		}
		rec := old.clone()
		rec.Usage[uuid] += mib
		return r.commitUsage(uid, old, rec, map[string]uint64{uuid: mib})
	})
}

// Free returns mib MiB on device uuid from the record of process
// (pid, startTime). Freeing more than the process holds is an error, and so
// is freeing while the process is locked or checkpointed (ErrLocked).
func (r *Registry) Free(pid int, startTime uint64, uuid string, mib uint64) error {
	if _, err := r.device(uuid); err != nil {
		return err
	}
	return r.lockedOwner(pid, func(uid uint32) error {
		rec, err := r.ownRecord(uid, pid, startTime)
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
		return r.writeRecord(uid, rec)
	})
}

// Release removes the record of process pid, freeing all its memory. A
// process without a record is not an error, nor is one that is gone (its
// record is garbage that the next scan prunes).
func (r *Registry) Release(pid int) error {
	err := r.lockedOwner(pid, func(uid uint32) error {
		err := os.Remove(r.recordPath(uid, pid))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("process %d: %w", pid, err)
		}
		return nil
	})
	if errors.Is(err, ErrNoSuchProcess) {
		return nil
	}
	return err
}

// Park moves all device memory of process (pid, startTime) to its parked
// memory, as a checkpoint moves GPU memory to host RAM.
func (r *Registry) Park(pid int, startTime uint64) error {
	return r.lockedOwner(pid, func(uid uint32) error {
		rec, err := r.ownRecord(uid, pid, startTime)
		if err != nil {
			return err
		}
		for uuid, n := range rec.Usage {
			rec.Parked[uuid] += n
		}
		rec.Usage = map[string]uint64{}
		return r.writeRecord(uid, rec)
	})
}

// Unpark moves the parked memory of process (pid, startTime) back onto its
// devices, as a restore does. It moves all or nothing, and fails with an
// *OutOfMemoryError when a device lacks room.
func (r *Registry) Unpark(pid int, startTime uint64) error {
	return r.lockedScan(pid, startTime, func(uid uint32, s scanResult) error {
		old, ok := s.live[pid]
		if !ok {
			return fmt.Errorf("process %d: no simulated GPU memory: %w", pid, ErrNoSuchProcess)
		}
		uuids := make([]string, 0, len(old.Parked))
		for uuid := range old.Parked {
			uuids = append(uuids, uuid)
		}
		sort.Strings(uuids)
		for _, uuid := range uuids {
			dev, err := r.device(uuid)
			if err != nil {
				return err
			}
			if free := freeMiB(dev, s.used(uuid)); old.Parked[uuid] > free {
				return &OutOfMemoryError{Device: dev, RequestedMiB: old.Parked[uuid], FreeMiB: free}
			}
		}
		rec := old.clone()
		for _, uuid := range uuids {
			rec.Usage[uuid] += rec.Parked[uuid]
		}
		added := rec.Parked
		rec.Parked = map[string]uint64{}
		return r.commitUsage(uid, old, rec, added)
	})
}

// lockedScan runs fn under the lock of the owner of process
// (pid, startTime), which must be running, with a fresh scan, after pruning
// the owner's stale records.
func (r *Registry) lockedScan(pid int, startTime uint64, fn func(uid uint32, s scanResult) error) error {
	if err := checkRunning(pid, startTime); err != nil {
		return err
	}
	return r.lockedOwner(pid, func(uid uint32) error {
		if err := checkRunning(pid, startTime); err != nil {
			return err
		}
		s, err := r.scan()
		if err != nil {
			return err
		}
		r.removeGarbage(uid, s)
		return fn(uid, s)
	})
}

// commitUsage replaces old, a record of uid's, with rec, which adds the
// MiB of added on its devices, then checks those devices again. Users'
// calls do not wait for each other (no user can hold up another), so a
// process of another user may have taken the same memory meanwhile; when
// a device is now over its total, rec is undone and the call fails as out
// of memory, which is what one of the two would have got.
func (r *Registry) commitUsage(uid uint32, old, rec record, added map[string]uint64) error {
	if err := r.writeRecord(uid, rec); err != nil {
		return err
	}
	undo := func(err error) error {
		if uerr := r.writeRecord(uid, old); uerr != nil {
			return errors.Join(err, uerr)
		}
		return err
	}
	s, err := r.scan()
	if err != nil {
		return undo(err)
	}
	uuids := make([]string, 0, len(added))
	for uuid := range added {
		uuids = append(uuids, uuid)
	}
	sort.Strings(uuids)
	for _, uuid := range uuids {
		dev, err := r.device(uuid)
		if err != nil {
			return undo(err)
		}
		if used := s.used(uuid); used > dev.CUDATotalMiB() {
			return undo(&OutOfMemoryError{Device: dev, RequestedMiB: added[uuid], FreeMiB: freeMiB(dev, used-min(used, added[uuid]))})
		}
	}
	return nil
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

// freeMiB is a device's free memory given its processes' usage.
func freeMiB(dev Device, used uint64) uint64 {
	return dev.CUDATotalMiB() - min(used, dev.CUDATotalMiB())
}
