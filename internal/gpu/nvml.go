package gpu

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned long long, which
// NVML reports as a process's memory when it cannot tell.
const notAvailable = math.MaxUint64

// NVML is the backend for real GPUs, read through the NVIDIA driver's NVML
// library. Sample may be called concurrently; Close comes after the last one.
type NVML struct {
	lib    nvml.Interface
	driver string // driver version, read once at start; "" when unknown
	util   processUtil
}

// NewNVML loads and initialises NVML. Without a driver it fails with an error
// wrapping ErrNoDriver that points to --sim.
func NewNVML() (*NVML, error) {
	return newNVML(nvml.New())
}

func newNVML(lib nvml.Interface) (*NVML, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		n := &NVML{lib: lib, util: processUtil{seen: map[string]uint64{}}}
		if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
			n.driver = v
		}
		return n, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("nvml: %w: libnvidia-ml.so.1 could not be loaded (use --sim N to run with N simulated GPUs)", ErrNoDriver)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("nvml: %w: the kernel driver is not loaded (use --sim N to run with N simulated GPUs)", ErrNoDriver)
	default:
		return nil, fmt.Errorf("nvml: init: %w", ret)
	}
}

// Name returns "nvml".
func (n *NVML) Name() string { return "nvml" }

// BetweenCalls runs fn. A real driver call runs in the kernel, so a
// process stopped meanwhile never stops inside one.
func (n *NVML) BetweenCalls(_ uint32, fn func()) error { fn(); return nil }

// Sample reads every device and the processes using it. Metrics a device
// does not support are nil. Only a failed device count fails the sample; a
// device whose handle or UUID cannot be read (fallen off the bus) is left
// out, and one whose other queries fail is listed with Err.
func (n *NVML) Sample(ctx context.Context) (Sample, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return Sample{}, fmt.Errorf("nvml: device count: %w", ret)
	}
	s := Sample{Devices: make([]Device, 0, count), Procs: []ProcUsage{}, Driver: n.driver}
	for i := range count {
		if err := ctx.Err(); err != nil {
			return Sample{}, err
		}
		dev, procs, h, err := n.device(i)
		switch {
		case dev.UUID == "":
			continue // unidentifiable: the daemon reports it missing
		case err != nil:
			s.Devices = append(s.Devices, Device{Index: i, UUID: dev.UUID, Name: dev.Name, TotalMiB: dev.TotalMiB, Err: err.Error()})
			continue
		}
		n.util.fill(h, dev.UUID, procs)
		s.Devices = append(s.Devices, dev)
		s.Procs = append(s.Procs, procs...)
	}
	sort.Slice(s.Procs, func(i, j int) bool {
		a, b := s.Procs[i], s.Procs[j]
		if a.UUID != b.UUID {
			return a.UUID < b.UUID
		}
		return a.PID < b.PID
	})
	return s, nil
}

// device reads device i, with its handle, and its processes.
func (n *NVML) device(i int) (Device, []ProcUsage, nvml.Device, error) {
	h, ret := n.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, nil, nil, fmt.Errorf("handle: %w", ret)
	}
	d := Device{Index: i}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, nil, nil, fmt.Errorf("uuid: %w", ret)
	}
	// From here on an error keeps the identity, so the device is listed
	// with the error.
	fail := func(err error) (Device, []ProcUsage, nvml.Device, error) {
		return Device{Index: i, UUID: uuid, Name: d.Name}, nil, nil, err
	}
	d.UUID = uuid
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return fail(fmt.Errorf("name: %w", ret))
	}
	mem, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return fail(fmt.Errorf("memory info: %w", ret))
	}
	d.TotalMiB, d.UsedMiB = mem.Total>>20, mem.Used>>20

	util, ret := h.GetUtilizationRates()
	if ok, err := supported(ret); err != nil {
		return fail(fmt.Errorf("utilization: %w", err))
	} else if ok {
		pct := int(util.Gpu)
		d.UtilPercent = &pct
	}
	mw, ret := h.GetPowerUsage()
	if ok, err := supported(ret); err != nil {
		return fail(fmt.Errorf("power usage: %w", err))
	} else if ok {
		w := float64(mw) / 1000
		d.PowerWatts = &w
	}
	limit, ret := h.GetPowerManagementLimit()
	if ok, err := supported(ret); err != nil {
		return fail(fmt.Errorf("power limit: %w", err))
	} else if ok {
		w := float64(limit) / 1000
		d.PowerLimitWatts = &w
	}
	temp, ret := h.GetTemperature(nvml.TEMPERATURE_GPU)
	if ok, err := supported(ret); err != nil {
		return fail(fmt.Errorf("temperature: %w", err))
	} else if ok {
		c := int(temp)
		d.TempC = &c
	}

	// The current mode only: a pending one takes effect at the next reset
	// (NVML nvmlDeviceGetMigMode; libnvidia-container ignores it too).
	mig, _, ret := h.GetMigMode()
	if ok, err := supported(ret); err != nil {
		return fail(fmt.Errorf("MIG mode: %w", err))
	} else if ok {
		d.MIG = mig == nvml.DEVICE_MIG_ENABLE
	}

	procs, err := processes(h, d.UUID)
	if err != nil {
		return fail(err)
	}
	return d, procs, h, nil
}

// processes lists the compute and graphics processes on a device. A process
// in both lists appears once, with the larger reported memory.
func processes(h nvml.Device, uuid string) ([]ProcUsage, error) {
	used := map[int]uint64{}
	for _, list := range []struct {
		what string
		get  func() ([]nvml.ProcessInfo, nvml.Return)
	}{
		{"compute processes", h.GetComputeRunningProcesses},
		{"graphics processes", h.GetGraphicsRunningProcesses},
	} {
		infos, ret := list.get()
		if ok, err := supported(ret); err != nil {
			return nil, fmt.Errorf("%s: %w", list.what, err)
		} else if !ok {
			continue
		}
		for _, p := range infos {
			mib := uint64(0)
			if p.UsedGpuMemory != notAvailable {
				mib = p.UsedGpuMemory >> 20
			}
			used[int(p.Pid)] = max(used[int(p.Pid)], mib)
		}
	}
	out := make([]ProcUsage, 0, len(used))
	for pid, mib := range used {
		out = append(out, ProcUsage{PID: pid, UUID: uuid, UsedMiB: mib})
	}
	return out, nil
}

// supported maps an NVML result for an optional metric: ok on success, not
// ok on ERROR_NOT_SUPPORTED, an error otherwise.
func supported(ret nvml.Return) (bool, error) {
	switch ret {
	case nvml.SUCCESS:
		return true, nil
	case nvml.ERROR_NOT_SUPPORTED:
		return false, nil
	default:
		return false, ret
	}
}

// Close shuts NVML down.
func (n *NVML) Close() error {
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml: shutdown: %w", ret)
	}
	return nil
}
