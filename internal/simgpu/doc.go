// Package simgpu owns the simulated-GPU file protocol: the on-disk state that
// lets real processes share simulated GPUs on a machine without one.
//
// A sim directory holds:
//
//	gpus.json        the simulated devices, written once by the daemon
//	metrics.json     optional measurements by device uuid (utilization,
//	                 power draw and limit, temperature), set with SetMetrics
//	                 so that health filters can be tested; absent = unknown
//	faults.json      optional injected NVML failures, set with SetFaults:
//	                 "sample_error" fails every Snapshot (as NVML does when
//	                 the driver or a GPU is lost), "missing" leaves devices
//	                 out (fell off the bus), "device_errors" fails one
//	                 device's queries (listed with Err, no usage); absent =
//	                 no faults
//	procs/<pid>.json one record per process (host pid): its start time, its
//	                 device usage, its parked (checkpointed to host) memory,
//	                 "cuda", its CUDA checkpoint state ("locked",
//	                 "checkpointed" or "failed"; absent means running),
//	                 and "limit", its own cap per device (an MPS client's
//	                 pinned device memory limit, set with SetLimit)
//	lock             flock(LOCK_EX) around every change, so that concurrent
//	                 allocations never oversubscribe a device
//
// The daemon creates the directory with Create and samples it with Snapshot;
// simulated jobs, fillers and a fake cuda-checkpoint Open it and change their
// own record. A record counts only while its process is alive with the same
// start time; stale records are ignored and pruned. A record is removed when
// it holds no memory and no limit, unless its process is not running
// (locked, checkpointed or failed).
//
// The checkpoint state machine mirrors cuda-checkpoint's:
//
//	running -lock-> locked -checkpoint-> checkpointed -restore-> locked -unlock-> running
//
// Checkpoint parks the device memory, restore puts it back (optionally on
// other devices) if it fits, and while a process is locked or checkpointed
// its Allocate and Free fail with ErrLocked, as CUDA calls block.
//
// procs/ is world-writable (sticky, like /tmp) so that unprivileged jobs can
// register themselves: the simulated state is a test vehicle, not a security
// boundary.
package simgpu
