package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpusched/gpusched/internal/simgpu"
)

// Sim is the simulated backend: devices from a simgpu registry, with usage
// reported by the simulated processes themselves. Utilization, power draw
// and limit and temperature are what the registry's SetMetrics set, and nil
// (like unsupported NVML metrics) where nothing was set; utilization not
// set so is what the processes on the device declare (gpusched-simjob
// --util), nil when none does. Its driver version
// is "sim". The failures injected in the sim directory's faults.json
// (simgpu.SetFaults) come out as NVML's would: a failed sample, a device
// left out, a device with Err. A device created in MIG mode (SimSpec.MIG)
// says so, as NVML's current MIG mode would.
type Sim struct {
	reg *simgpu.Registry

	mu       sync.Mutex
	reported map[string]bool // untrusted records already reported
}

// NewSim creates the sim directory dir with the devices of spec.
// Records of simulated processes already in dir are kept.
func NewSim(dir string, spec SimSpec) (*Sim, error) {
	if spec.Count < 1 {
		return nil, fmt.Errorf("simulated GPUs: count %d: need at least 1", spec.Count)
	}
	devs := simgpu.Devices(spec.Count, spec.SizeMiB)
	for i := range devs {
		devs[i].ReservedMiB, devs[i].ContextMiB = spec.ReservedMiB, spec.ContextMiB
	}
	for _, i := range spec.MIG {
		if i < 0 || i >= len(devs) {
			return nil, fmt.Errorf("simulated GPUs: MIG mode for GPU %d, of %d", i, len(devs))
		}
		devs[i].MIG = true
	}
	reg, err := simgpu.Create(dir, devs)
	if err != nil {
		return nil, err
	}
	return &Sim{reg: reg}, nil
}

// SimDriver is the driver version the simulated backend reports.
const SimDriver = "sim"

// Name returns "sim".
func (s *Sim) Name() string { return "sim" }

// Dir returns the sim directory, which jobs find through GPUSCHED_SIM_DIR.
func (s *Sim) Dir() string { return s.reg.Dir() }

// SetLockWait bounds how long the backend waits for a user's simulated
// GPU lock (see simgpu.Registry.SetLockWait). Call it before use.
func (s *Sim) SetLockWait(d time.Duration) { s.reg.SetLockWait(d) }

// AddUser gives uid a record directory, so that the processes the daemon
// starts for uid can register their simulated GPU memory.
func (s *Sim) AddUser(uid uint32) error { return s.reg.AddUser(uid) }

// BetweenCalls runs fn while no simulated process of uid is inside a
// simulated driver call, so that a process stopped meanwhile does not stop
// holding its user's lock.
func (s *Sim) BetweenCalls(uid uint32, fn func()) error { return s.reg.BetweenCalls(uid, fn) }

// Sample reads the registry.
func (s *Sim) Sample(ctx context.Context) (Sample, error) {
	if err := ctx.Err(); err != nil {
		return Sample{}, err
	}
	snap, err := s.reg.Snapshot()
	if err != nil {
		return Sample{}, err
	}
	out := Sample{Devices: make([]Device, len(snap.Devices)), Procs: make([]ProcUsage, len(snap.Procs)), Driver: SimDriver}
	for i, d := range snap.Devices {
		m := d.Metrics
		out.Devices[i] = Device{Index: d.Index, UUID: d.UUID, Name: d.Name, TotalMiB: d.TotalMiB, UsedMiB: d.UsedMiB,
			UtilPercent: m.UtilPercent, PowerWatts: m.PowerWatts, PowerLimitWatts: m.PowerLimitWatts, TempC: m.TempC, MIG: d.MIG}
		if d.Err != "" {
			out.Devices[i] = Device{Index: d.Index, UUID: d.UUID, Name: d.Name, TotalMiB: d.TotalMiB, Err: d.Err, MIG: d.MIG}
		}
	}
	for i, p := range snap.Procs {
		out.Procs[i] = ProcUsage{PID: p.PID, UUID: p.UUID, UsedMiB: p.UsedMiB, UtilPercent: &p.UtilPercent}
	}
	out.Untrusted = s.fresh(snap.Untrusted)
	return out, nil
}

// fresh returns those of untrusted not reported by an earlier sample, and
// remembers the current ones (only those: one that goes and comes back is
// new again).
func (s *Sim) fresh(untrusted []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	now := make(map[string]bool, len(untrusted))
	for _, u := range untrusted {
		now[u] = true
		if !s.reported[u] {
			out = append(out, u)
		}
	}
	s.reported = now
	return out
}

// CarryOut returns the CUDA state of simulated process pid, for a dump.
func (s *Sim) CarryOut(pid int) ([]byte, error) { return s.reg.ExportProcess(pid) }

// CarryIn gives a restored process (pid, start) the state CarryOut took.
func (s *Sim) CarryIn(pid int, start uint64, state []byte) error {
	return s.reg.ImportProcess(pid, start, state)
}

// Close releases nothing: the sim directory stays for jobs that outlive the
// daemon.
func (s *Sim) Close() error { return nil }
