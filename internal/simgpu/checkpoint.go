package simgpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
)

// The CUDA checkpoint states of a process, as cuda-checkpoint --get-state
// prints them. A record without a state is running.
const (
	StateRunning      = "running"
	StateLocked       = "locked"
	StateCheckpointed = "checkpointed"
	StateFailed       = "failed"
)

// CheckpointState returns the CUDA checkpoint state of live process pid.
func (r *Registry) CheckpointState(pid int) (string, error) {
	var state string
	err := r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		state = rec.state()
		return err
	})
	return state, err
}

// LockProcess moves process pid from running to locked: its CUDA calls
// (Allocate, Free) block until it is unlocked. It is LockProcessContext
// without a timeout: a member of an NCCL group may wait for ever.
func (r *Registry) LockProcess(pid int) error {
	return r.LockProcessContext(context.Background(), pid)
}

// LockProcessContext is LockProcess bounded by ctx. A member of an NCCL
// group waits while another member is locked or checkpointed (see
// SetNCCL), and fails with ErrTimeout once ctx ends, as the real lock
// given --timeout fails with CUDA_ERROR_TIMEOUT.
func (r *Registry) LockProcessContext(ctx context.Context, pid int) error {
	for {
		peer, group := 0, ""
		err := r.lockedCUDA(pid, func(uid uint32) error {
			rec, err := r.cudaRecord(uid, pid)
			if err != nil {
				return err
			}
			if err := rec.need("lock", StateRunning); err != nil {
				return err
			}
			if peer, group = r.ncclPeer(uid, rec), rec.NCCL; peer != 0 {
				return nil
			}
			rec.CUDA = StateLocked
			return r.writeRecord(uid, rec)
		})
		if err != nil || peer == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d: lock: waited for process %d of its NCCL group %q to be unlocked (NVIDIA/cuda-checkpoint#30): %w",
				pid, peer, group, ErrTimeout)
		case <-time.After(ncclPoll):
		}
	}
}

// UnlockProcess moves process pid from locked to running.
func (r *Registry) UnlockProcess(pid int) error {
	return r.transition(pid, "unlock", StateLocked, StateRunning)
}

// CheckpointProcess moves process pid from locked to checkpointed, parking
// all its device memory in host RAM. It returns the MiB moved.
func (r *Registry) CheckpointProcess(pid int) (uint64, error) {
	var moved uint64
	err := r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		if err := rec.need("checkpoint", StateLocked); err != nil {
			return err
		}
		for uuid, n := range rec.Usage {
			rec.Parked[uuid] += n
			moved += n
		}
		rec.Usage = map[string]uint64{}
		rec.CUDA = StateCheckpointed
		return r.writeRecord(uid, rec)
	})
	return moved, err
}

// RestoreProcess moves process pid from checkpointed to locked, putting its
// parked memory back on its devices, or on remap[uuid] where the map names
// another device. It moves all or nothing: when a device lacks room it fails
// with an *OutOfMemoryError and the process stays checkpointed. It returns
// the MiB moved.
func (r *Registry) RestoreProcess(pid int, remap map[string]string) (uint64, error) {
	var moved uint64
	err := r.lockedCUDA(pid, func(uid uint32) error {
		old, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		if err := old.need("restore", StateCheckpointed); err != nil {
			return err
		}
		for _, to := range remap {
			if _, err := r.device(to); err != nil {
				return fmt.Errorf("process %d: restore: device map: %w", pid, err)
			}
		}
		want := map[string]uint64{} // target uuid -> MiB
		for uuid, n := range old.Parked {
			if to, ok := remap[uuid]; ok {
				uuid = to
			}
			want[uuid] += n
		}
		s, err := r.scan()
		if err != nil {
			return err
		}
		r.removeGarbage(uid, s)
		targets := make([]string, 0, len(want))
		for uuid := range want {
			targets = append(targets, uuid)
		}
		sort.Strings(targets)
		for _, uuid := range targets {
			dev, err := r.device(uuid)
			if err != nil {
				return fmt.Errorf("process %d: restore: %w", pid, err)
			}
			if free := freeMiB(dev, s.used(uuid)); want[uuid] > free {
				return fmt.Errorf("process %d: restore: %w", pid,
					&OutOfMemoryError{Device: dev, RequestedMiB: want[uuid], FreeMiB: free})
			}
		}
		rec := old.clone()
		for _, uuid := range targets {
			rec.Usage[uuid] += want[uuid]
			moved += want[uuid]
		}
		rec.Parked = map[string]uint64{}
		rec.CUDA = StateLocked
		if err := r.commitUsage(uid, old, rec, want); err != nil {
			moved = 0
			return fmt.Errorf("process %d: restore: %w", pid, err)
		}
		return nil
	})
	return moved, err
}

// SetCheckpointState forces the CUDA state of process pid, whatever it was:
// fault injection uses it to leave a process failed.
func (r *Registry) SetCheckpointState(pid int, state string) error {
	switch state {
	case StateRunning, StateLocked, StateCheckpointed, StateFailed:
	default:
		return fmt.Errorf("process %d: unknown CUDA state %q", pid, state)
	}
	return r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		rec.CUDA = state
		return r.writeRecord(uid, rec)
	})
}

// transition moves process pid from state from to state to.
func (r *Registry) transition(pid int, action, from, to string) error {
	return r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		if err := rec.need(action, from); err != nil {
			return err
		}
		rec.CUDA = to
		return r.writeRecord(uid, rec)
	})
}

// lockedCUDA is lockedOwner for a checkpoint call: a process that is gone
// has no CUDA context (ErrNoCUDA).
func (r *Registry) lockedCUDA(pid int, fn func(uid uint32) error) error {
	err := r.lockedOwner(pid, fn)
	if errors.Is(err, ErrNoSuchProcess) && !errors.Is(err, ErrNoCUDA) {
		return fmt.Errorf("process %d: %w", pid, ErrNoCUDA)
	}
	return err
}

// cudaRecord reads the record of uid's live process pid, whose start time
// must match the running process; call it under uid's lock.
func (r *Registry) cudaRecord(uid uint32, pid int) (record, error) {
	st, err := readStat(pid)
	if errors.Is(err, ErrNoSuchProcess) || (err == nil && st.Exited()) {
		return record{}, fmt.Errorf("process %d: %w", pid, ErrNoCUDA)
	}
	if err != nil {
		return record{}, err
	}
	rec, owner, err := readRecord(r.recordPath(uid, pid))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && (!procfs.SameStart(rec.StartTime, st.StartTime) || owner != uid)) {
		return record{}, fmt.Errorf("process %d: no simulated GPU record: %w", pid, ErrNoCUDA)
	}
	if err != nil {
		return record{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return rec, nil
}

// state returns the record's CUDA state, "" read as running.
func (rec *record) state() string {
	if rec.CUDA == "" {
		return StateRunning
	}
	return rec.CUDA
}

// need checks that the record is in state want before action.
func (rec *record) need(action, want string) error {
	if got := rec.state(); got != want {
		return fmt.Errorf("process %d: %s: process is %s, not %s: %w", rec.PID, action, got, want, ErrIllegalState)
	}
	return nil
}

// blocked fails with ErrLocked while the process's CUDA calls are blocked.
func (rec *record) blocked() error {
	if s := rec.state(); s == StateLocked || s == StateCheckpointed {
		return fmt.Errorf("process %d: %s: %w", rec.PID, s, ErrLocked)
	}
	return nil
}
