package simgpu

import (
	"fmt"
	"time"
)

// An NCCL group stands for the processes of one NCCL communicator on this
// host (the ranks of a torchrun job, nccl-tests under mpirun). The real
// driver cannot checkpoint them one at a time: NVIDIA/cuda-checkpoint#30
// (driver 575.57.08, nccl-tests launched with openmpi) reports that while
// process 1 is locked or checkpointed, cuda-checkpoint on process 2 hangs
// ("any action including --get-state") until process 1 is unlocked, and
// the maintainers answer that checkpointing applications that use NCCL is
// not supported yet; #45 shows the same hang with torch.distributed. The
// simulated lock waits the same way (LockProcessContext); its other
// actions do not.

// maxGroupLen bounds an NCCL group name.
const maxGroupLen = 64

// ncclPoll is how often a lock waiting for an NCCL peer looks again.
const ncclPoll = 5 * time.Millisecond

// SetNCCL records that process (pid, startTime), which must be running, is
// a member of NCCL group group ("" leaves its group). A member keeps its
// record, memory or not, as a communicator keeps its CUDA context. Groups
// are per user: only the same user's processes are peers.
func (r *Registry) SetNCCL(pid int, startTime uint64, group string) error {
	if len(group) > maxGroupLen {
		return fmt.Errorf("process %d: NCCL group name longer than %d bytes", pid, maxGroupLen)
	}
	return r.lockedScan(pid, startTime, func(uid uint32, s scanResult) error {
		rec, ok := s.live[pid]
		if !ok {
			rec = newRecord(pid, startTime)
		}
		rec.NCCL = group
		return r.writeRecord(uid, rec)
	})
}

// ncclPeer returns a live process of uid's that shares rec's NCCL group
// and is locked or checkpointed; 0 when none is (or rec has no group).
// Call it under uid's lock.
func (r *Registry) ncclPeer(uid uint32, rec record) int {
	if rec.NCCL == "" {
		return 0
	}
	s := newScanResult()
	r.scanUser(&s, uid)
	for pid, other := range s.live {
		if pid != rec.PID && other.NCCL == rec.NCCL && other.blocked() != nil {
			return pid
		}
	}
	return 0
}
