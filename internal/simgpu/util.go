package simgpu

import "fmt"

// SetUtil sets how busy process (pid, startTime), which must be running,
// keeps each device it holds memory on: percent (0..100) of the time, as
// NVML measures a GPU's utilization. Snapshot reports a device's
// utilization as the sum of its running processes' (at most 100) when one
// of them declared any, unless SetMetrics set it. 0 clears it.
func (r *Registry) SetUtil(pid int, startTime uint64, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("process %d: utilization %d%%: must be 0..100", pid, percent)
	}
	return r.lockedScan(pid, startTime, func(uid uint32, s scanResult) error {
		rec, ok := s.live[pid]
		if !ok {
			rec = newRecord(pid, startTime)
		}
		rec.Util = percent
		return r.writeRecord(uid, rec)
	})
}

// util is device uuid's utilization: the sum of what the running
// processes holding memory on it declared with SetUtil, at most 100 (a
// locked or checkpointed process does no work). ok is false when no
// process there declared any: the utilization is then unknown, as when
// NVML cannot measure it.
func (s *scanResult) util(uuid string) (percent int, ok bool) {
	for _, rec := range s.live {
		if rec.Util > 0 && rec.Usage[uuid] > 0 {
			ok = true
			percent += rec.working()
		}
	}
	return min(percent, 100), ok
}

// working is how busy the process keeps each device it holds memory on:
// what it declared, while it runs, held to 0..100 (the record is its
// user's file: SetUtil's check binds only callers that use it).
func (r record) working() int {
	if r.CUDA != "" {
		return 0
	}
	return min(max(r.Util, 0), 100)
}
