package simgpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/gpusched/gpusched/internal/cgroup"
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

// CheckpointStateContext is CheckpointState as the driver answers another
// process: like every driver action here it waits while pid is in a frozen
// cgroup (see awaitRunnable).
func (r *Registry) CheckpointStateContext(ctx context.Context, pid int) (string, error) {
	if err := awaitRunnable(ctx, pid, "get-state"); err != nil {
		return "", err
	}
	return r.CheckpointState(pid)
}

// awaitRunnable waits until pid is neither in a frozen cgroup
// (cgroup.freeze) nor stopped (SIGSTOP, ptrace), or fails with ErrTimeout
// once ctx ends. The driver's work on a process is done by the process's
// own driver threads, which do not run meanwhile: CRIU's CUDA plugin ran
// cuda-checkpoint after freezing a container's cgroup and it "hangs
// indefinitely" (checkpoint-restore/criu#2458; CRIU now locks every CUDA
// process before it freezes, criu#2470). On a lent H200 (driver
// 580.159.04, 2026-11-28, docs/hardware.md): in a frozen cgroup get-state
// gave no answer in 5 s, and lock (past its own --timeout), checkpoint,
// restore and unlock each waited the 6 s the cgroup stayed frozen and went
// through 3 to 1006 ms after the thaw, while a lock or restore whose tool
// was killed meanwhile did not land; a stopped process had get-state,
// lock (past a 2 s --timeout) and restore give no answer in 5 s, and all
// went through once it was continued. So the wait is bounded by the
// caller alone.
func awaitRunnable(ctx context.Context, pid int, action string) error {
	for {
		why := ""
		if frozen := cgroup.FrozenOf(pid); frozen != "" {
			why = "its cgroup " + frozen + " is frozen"
		} else if state, err := threadState(pid, pid); err == nil && stopped(state) {
			why = "it is stopped"
		}
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("process %d: %s: %s, and its driver threads with it (checkpoint-restore/criu#2458): %w", pid, action, why, ErrTimeout)
		case <-time.After(ncclPoll):
		}
	}
}

// LockProcess moves process pid from running to locked: its CUDA calls
// (Allocate, Free) block until it is unlocked. It is LockProcessContext
// without a deadline: a member of an NCCL group may wait for ever.
func (r *Registry) LockProcess(pid int) error {
	return r.LockProcessContext(context.Background(), pid, 0)
}

// LockProcessContext is LockProcess as the driver does it for a caller
// that gives up when ctx ends. A member of an NCCL group waits while
// another member is locked or checkpointed (see SetNCCL), and fails with
// ErrTimeout after timeout (0: none) or once ctx ends, as the real lock
// given --timeout fails with CUDA_ERROR_TIMEOUT. A process that is frozen
// or stopped makes it wait past timeout, until ctx ends (awaitRunnable).
func (r *Registry) LockProcessContext(ctx context.Context, pid int, timeout time.Duration) error {
	if err := awaitRunnable(ctx, pid, "lock"); err != nil {
		return err
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
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

// UnlockProcessContext is UnlockProcess as the driver does it for a
// caller that gives up when ctx ends (see awaitRunnable).
func (r *Registry) UnlockProcessContext(ctx context.Context, pid int) error {
	if err := awaitRunnable(ctx, pid, "unlock"); err != nil {
		return err
	}
	return r.UnlockProcess(pid)
}

// UnlockProcess moves process pid from locked to running.
func (r *Registry) UnlockProcess(pid int) error {
	return r.transition(pid, "unlock", StateLocked, StateRunning)
}

// CheckpointProcessContext is CheckpointProcess as the driver does it for
// a caller that gives up when ctx ends (see awaitRunnable).
func (r *Registry) CheckpointProcessContext(ctx context.Context, pid int) (uint64, error) {
	if err := awaitRunnable(ctx, pid, "checkpoint"); err != nil {
		return 0, err
	}
	return r.CheckpointProcess(pid)
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
// with an *OutOfMemoryError and the process stays checkpointed, but every
// later restore of it fails with ErrRestoreBroken, as on NVIDIA's driver
// (NVIDIA/cuda-checkpoint#44). A map must pair every device the process was
// checkpointed on with one of the same chip type (ErrBadDeviceMap). While
// the process's restore thread is stopped the restore waits for it to run,
// as the real one does, and fails with ErrRestoreThreadStopped when ctx
// ends first. It returns the MiB moved.
func (r *Registry) RestoreProcess(ctx context.Context, pid int, remap map[string]string) (uint64, error) {
	for {
		moved, err := r.restoreOnce(pid, remap)
		var stopped *threadStoppedError
		if !errors.As(err, &stopped) {
			return moved, err
		}
		if err := awaitRestoreThread(ctx, pid, stopped.tid); err != nil {
			return 0, fmt.Errorf("process %d: restore: %w", pid, err)
		}
	}
}

// restoreOnce is one attempt of RestoreProcess; a stopped restore thread
// fails it with a *threadStoppedError.
func (r *Registry) restoreOnce(pid int, remap map[string]string) (uint64, error) {
	var moved uint64
	err := r.lockedCUDA(pid, func(uid uint32) error {
		old, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		if err := old.need("restore", StateCheckpointed); err != nil {
			return err
		}
		if err := r.checkDeviceMap(old, remap); err != nil {
			return fmt.Errorf("process %d: restore: %w", pid, err)
		}
		if old.RestoreBroken {
			return fmt.Errorf("process %d: restore: %w", pid, ErrRestoreBroken)
		}
		if err := checkRestoreThread(pid, old.RestoreTID); err != nil {
			return err
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
				return r.breakRestore(uid, old, fmt.Errorf("process %d: restore: %w", pid,
					&OutOfMemoryError{Device: dev, RequestedMiB: want[uuid], FreeMiB: free}))
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
			err = fmt.Errorf("process %d: restore: %w", pid, err)
			if errors.Is(err, ErrOutOfMemory) {
				return r.breakRestore(uid, old, err)
			}
			return err
		}
		return nil
	})
	return moved, err
}

// checkDeviceMap validates a restore's map against the devices rec was
// checkpointed on (those its parked memory is on), as the driver does
// before anything moves: every target must exist, every checkpointed
// device must be mapped ("If an array of GPU UUID pairs is specified, it
// must contain every checkpointed GPU", cuCheckpointProcessRestore in the
// CUDA driver API reference; a map leaving one out fails with "invalid
// argument", NVIDIA/cuda-checkpoint#35), and onto a device of the same
// chip type ("The GPU to restore onto needs to ... be of the same chip
// type as the old GPU", ibid.; NVIDIA/cuda-checkpoint#18, from NVIDIA: "it's
// required that the GPU type and order be the same"), here a device of the
// same name; the error code for that case is not documented, and
// CUDA_ERROR_INVALID_VALUE is assumed. A map that moves
// nothing counts as none: in #35 the one pair turned into an identity
// restored where the same pair onto another GPU was refused. Devices the
// map lists beyond those are allowed (CRIU's --gpu-device-map,
// checkpoint-restore/criu#2836, maps every GPU of the machine).
func (r *Registry) checkDeviceMap(rec record, remap map[string]string) error {
	moves := false
	for from, to := range remap {
		if _, err := r.device(to); err != nil {
			return fmt.Errorf("device map: %w", err)
		}
		moves = moves || from != to
	}
	if !moves {
		return nil
	}
	uuids := make([]string, 0, len(rec.Parked))
	for uuid := range rec.Parked {
		uuids = append(uuids, uuid)
	}
	sort.Strings(uuids)
	for _, uuid := range uuids {
		to, ok := remap[uuid]
		if !ok {
			return fmt.Errorf("%w: checkpointed GPU %s is not in it (a device map must list every checkpointed GPU)", ErrBadDeviceMap, uuid)
		}
		from, ferr := r.device(uuid)
		dst, _ := r.device(to)
		if ferr == nil && from.Name != dst.Name {
			return fmt.Errorf("%w: %s (%s) and %s (%s) are different chips", ErrBadDeviceMap, uuid, from.Name, to, dst.Name)
		}
	}
	return nil
}

// breakRestore records that a restore of old's process ran out of memory,
// after which the driver refuses every restore of it, and returns err.
func (r *Registry) breakRestore(uid uint32, old record, err error) error {
	old.RestoreBroken = true
	if werr := r.writeRecord(uid, old); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// BreakRestore does to process pid what a restore that runs out of memory
// does (later restores fail with ErrRestoreBroken): for an injected
// out-of-memory restore.
func (r *Registry) BreakRestore(pid int) error {
	return r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		rec.RestoreBroken = true
		return r.writeRecord(uid, rec)
	})
}

// RestoreThreadID returns the host tid of live process pid's CUDA restore
// thread, as cuda-checkpoint --get-restore-tid prints it.
func (r *Registry) RestoreThreadID(pid int) (int, error) {
	var tid int
	err := r.lockedCUDA(pid, func(uid uint32) error {
		rec, err := r.cudaRecord(uid, pid)
		if err != nil {
			return err
		}
		if tid = rec.RestoreTID; tid <= 0 {
			return fmt.Errorf("process %d: %w recorded", pid, ErrNoRestoreThread)
		}
		return nil
	})
	return tid, err
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
