package simgpu

import (
	"fmt"
	"slices"
	"sort"
)

// ProcUsage is one live process's memory on one device, and how busy it
// keeps it.
type ProcUsage struct {
	PID     int // host pid
	UUID    string
	UsedMiB uint64
	// UtilPercent is what the process declared with SetUtil while it runs;
	// 0 when it declared nothing or is locked or checkpointed (it does no
	// work), as NVML's per-process utilization has no sample for a process
	// that did none.
	UtilPercent int
}

// DeviceUsage is a device with its used memory as NVML reports it (the
// sum of its live processes' usage plus the driver's reserve) and
// the measurements set by SetMetrics (zero when none), with UtilPercent,
// unless set so, what its processes declared with SetUtil (nil when none
// did). Err is set, and
// usage and metrics are zero, when an injected fault fails the device's
// queries.
type DeviceUsage struct {
	Device
	UsedMiB uint64
	Metrics Metrics
	Err     string
}

// Snapshot is the simulated devices' state at one moment.
type Snapshot struct {
	Devices []DeviceUsage // sorted by index
	Procs   []ProcUsage   // nonzero usage on known devices, sorted by uuid then pid
	// Untrusted lists the records left out because they are not the named
	// process's own (written by another user, naming another user's
	// process) or cannot be read, each as "procs/<uid>/<pid>.json: why".
	Untrusted []string
}

// Snapshot reads the live usage. It never waits for a lock, so a stopped
// process holding one cannot stall the caller; a user's stale records are
// pruned only when that user's lock is free (and the caller may take it).
// The failures injected with SetFaults apply: the whole snapshot fails
// (wrapping ErrSampleFailed), missing devices are left out with their
// processes, and failing devices carry Err.
func (r *Registry) Snapshot() (Snapshot, error) {
	faults, err := r.readFaults()
	if err != nil {
		return Snapshot{}, err
	}
	if faults.SampleError != "" {
		return Snapshot{}, fmt.Errorf("%w: %s", ErrSampleFailed, faults.SampleError)
	}
	s, err := r.scan()
	if err != nil {
		return Snapshot{}, err
	}
	for uid := range s.untidy() {
		r.tryLockedUser(uid, func() {
			// Rescan under the lock: a pid may have been reused meanwhile,
			// and a temporary file seen without the lock may be in use.
			s2 := newScanResult()
			r.scanUser(&s2, uid)
			r.removeGarbage(uid, s2)
		})
	}
	metrics, err := r.readMetrics()
	if err != nil {
		return Snapshot{}, err
	}
	hidden := map[string]bool{} // devices whose processes are not listed
	snap := Snapshot{Devices: make([]DeviceUsage, 0, len(r.devices)), Procs: []ProcUsage{}, Untrusted: s.untrusted}
	for _, d := range r.devices {
		switch {
		case slices.Contains(faults.Missing, d.UUID):
			hidden[d.UUID] = true
		case faults.DeviceErrors[d.UUID] != "":
			hidden[d.UUID] = true
			snap.Devices = append(snap.Devices, DeviceUsage{Device: d, Err: faults.DeviceErrors[d.UUID]})
		default:
			m := metrics[d.UUID]
			if util, ok := s.util(d.UUID); ok && m.UtilPercent == nil {
				m.UtilPercent = &util
			}
			snap.Devices = append(snap.Devices, DeviceUsage{Device: d, UsedMiB: d.ReservedMiB + s.used(d.UUID), Metrics: m})
		}
	}
	for pid, rec := range s.live {
		for uuid, n := range rec.Usage {
			if _, ok := r.byUUID[uuid]; ok && n > 0 && !hidden[uuid] {
				snap.Procs = append(snap.Procs, ProcUsage{PID: pid, UUID: uuid, UsedMiB: n, UtilPercent: rec.working()})
			}
		}
	}
	sort.Slice(snap.Procs, func(i, j int) bool {
		a, b := snap.Procs[i], snap.Procs[j]
		if a.UUID != b.UUID {
			return a.UUID < b.UUID
		}
		return a.PID < b.PID
	})
	return snap, nil
}
