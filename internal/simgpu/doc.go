// Package simgpu owns the simulated-GPU file protocol: the on-disk state that
// lets real processes share simulated GPUs on a machine without one.
//
// A sim directory holds:
//
//	gpus.json        the simulated devices, written once by the daemon: each
//	                 one's memory, the part of it the driver reserves (in
//	                 NVML's total and used, not in CUDA's total) and what a
//	                 CUDA context costs on it
//	metrics.json     optional measurements by device uuid (utilization,
//	                 power draw and limit, temperature), set with SetMetrics
//	                 so that health filters can be tested; absent = unknown
//	faults.json      optional injected NVML failures, set with SetFaults:
//	                 "sample_error" fails every Snapshot (as NVML does when
//	                 the driver or a GPU is lost), "missing" leaves devices
//	                 out (fell off the bus), "device_errors" fails one
//	                 device's queries (listed with Err, no usage); absent =
//	                 no faults
//	procs/<uid>/<pid>.json
//	                 one record per process (host pid), in the directory of
//	                 the user it runs as: its start time, its device usage,
//	                 its parked (checkpointed to host) memory, "cuda", its
//	                 CUDA checkpoint state ("locked", "checkpointed" or
//	                 "failed"; absent means running), "limit", its own
//	                 cap per device (an MPS client's pinned device memory
//	                 limit, set with SetLimit), "nccl", the NCCL group
//	                 it belongs to (SetNCCL: its lock waits while another
//	                 member is locked, as NVIDIA/cuda-checkpoint#30 hangs),
//	                 "restore_tid" and "restore_ns_tid", its CUDA restore
//	                 thread (host tid and tid in its PID namespace),
//	                 "restore_broken", set once a restore ran out of memory,
//	                 and "util", how busy it keeps the devices it holds
//	                 memory on (percent, set with SetUtil: a device's
//	                 utilization is the sum of its running processes', once
//	                 one declared any, unless metrics.json sets it; each
//	                 process's own is in Snapshot's Procs, as NVML's
//	                 per-process samples give it)
//	locks/<uid>      flock(LOCK_EX) around every change to uid's records, so
//	                 that one user's calls and the daemon's checkpoints of
//	                 that user's processes never interleave
//
// The daemon creates the directory with Create and samples it with Snapshot;
// simulated jobs, fillers and a fake cuda-checkpoint Open it and change their
// own record. A record counts only while its process is alive with the same
// start time; stale records are ignored and pruned. A record is removed when
// it holds no memory, no limit and no utilization, unless its process is
// not running (locked, checkpointed or failed).
//
// The simulated GPU stands in for the driver, so it keeps the daemon's
// trust model: a user's process can change only its own user's records and
// block only its own user's calls. The directory, procs/ and locks/ are
// root's (0755); procs/<uid>/ (0755) and locks/<uid> (0600) are uid's,
// made by root (AddUser: the daemon, before it starts a process for uid).
// A record counts only when its file, its directory and the process it
// names (its real uid in /proc) all belong to the same user; others are
// listed in Snapshot.Untrusted and ignored. Each user's calls take only that
// user's lock, so a user holding theirs (or stopped inside a call) delays
// only their own processes; the daemon also bounds its waits (SetLockWait).
// Since users do not wait for each other, a call that adds device memory
// checks the device again once its record is written, and undoes it when
// another user's process took the memory meanwhile (commitUsage).
//
// The checkpoint state machine mirrors cuda-checkpoint's:
//
//	running -lock-> locked -checkpoint-> checkpointed -restore-> locked -unlock-> running
//
// Checkpoint parks the device memory, restore puts it back (optionally on
// other devices, by a device map that pairs every device the process was
// checkpointed on with one of the same name) if it fits, and while a
// process is locked or checkpointed its Allocate and Free fail with
// ErrLocked, as CUDA calls block. As on NVIDIA's driver, a restore waits
// while the process's restore thread is stopped (restorethread.go), and
// after a restore that ran out of memory no restore of that process
// succeeds again.
package simgpu
