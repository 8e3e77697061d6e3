package simgpu

import "sort"

// ProcUsage is one live process's memory on one device.
type ProcUsage struct {
	PID     int // host pid
	UUID    string
	UsedMiB uint64
}

// DeviceUsage is a device with the sum of its live processes' usage and
// the measurements set by SetMetrics (zero when none).
type DeviceUsage struct {
	Device
	UsedMiB uint64
	Metrics Metrics
}

// Snapshot is the simulated devices' state at one moment.
type Snapshot struct {
	Devices []DeviceUsage // sorted by index
	Procs   []ProcUsage   // nonzero usage on known devices, sorted by uuid then pid
}

// Snapshot reads the live usage. It never waits for the lock, so a stopped
// process holding it cannot stall the caller; stale records are pruned only
// when the lock is free.
func (r *Registry) Snapshot() (Snapshot, error) {
	s, err := r.scan()
	if err != nil {
		return Snapshot{}, err
	}
	if len(s.garbage) > 0 || len(s.temps) > 0 {
		r.tryLocked(func() {
			// Rescan under the lock: a pid may have been reused meanwhile,
			// and a temporary file seen without the lock may be in use.
			if s2, err := r.scan(); err == nil {
				r.removeGarbage(s2)
			}
		})
	}
	metrics, err := r.readMetrics()
	if err != nil {
		return Snapshot{}, err
	}
	snap := Snapshot{Devices: make([]DeviceUsage, len(r.devices)), Procs: []ProcUsage{}}
	for i, d := range r.devices {
		snap.Devices[i] = DeviceUsage{Device: d, UsedMiB: s.used(d.UUID), Metrics: metrics[d.UUID]}
	}
	for pid, rec := range s.live {
		for uuid, n := range rec.Usage {
			if _, ok := r.byUUID[uuid]; ok && n > 0 {
				snap.Procs = append(snap.Procs, ProcUsage{PID: pid, UUID: uuid, UsedMiB: n})
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
