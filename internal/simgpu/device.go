package simgpu

import (
	"errors"
	"fmt"
	"sort"
)

// Device is one simulated GPU as listed in gpus.json. MIG marks a GPU in
// MIG mode. ReservedMiB is the memory the driver sets aside for itself:
// NVML counts it in the device's total and used memory
// (nvmlDeviceGetMemoryInfo; _v2 lists it as "reserved"), while CUDA leaves
// it out of the total that cuMemGetInfo reports and no process can
// allocate it. It varies by GPU and driver: 616 MiB of 143771 on an H200
// with driver 580.159.04 (cuMemGetInfo's total: 143155 MiB).
type Device struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	TotalMiB    uint64 `json:"total_mib"`
	ReservedMiB uint64 `json:"reserved_mib,omitempty"`
	MIG         bool   `json:"mig,omitempty"`
}

// CUDATotalMiB is the device's memory as cuMemGetInfo reports its total:
// what processes can allocate, the driver's reserve left out.
func (d Device) CUDATotalMiB() uint64 { return d.TotalMiB - min(d.ReservedMiB, d.TotalMiB) }

// DefaultName is the product name given to simulated GPUs.
const DefaultName = "gpusched simulated GPU"

// DeviceUUID returns the stable UUID of simulated GPU i (i >= 0), shaped like
// an NVIDIA one: GPU-5a1d0000-0000-4000-8000-000000000003 for i = 3.
func DeviceUUID(i int) string {
	return fmt.Sprintf("GPU-5a1d0000-0000-4000-8000-%012d", i)
}

// Devices lists count simulated GPUs of sizeMiB each, with the stable
// UUIDs of DeviceUUID and the default name.
func Devices(count int, sizeMiB uint64) []Device {
	devs := make([]Device, count)
	for i := range devs {
		devs[i] = Device{Index: i, UUID: DeviceUUID(i), Name: DefaultName, TotalMiB: sizeMiB}
	}
	return devs
}

// gpusFile is the content of gpus.json.
type gpusFile struct {
	GPUs []Device `json:"gpus"`
}

// checkDevices validates a device list and returns a copy sorted by index.
func checkDevices(devs []Device) ([]Device, error) {
	if len(devs) == 0 {
		return nil, errors.New("no simulated GPUs")
	}
	out := append([]Device(nil), devs...)
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	seen := make(map[string]bool, len(out))
	for i, d := range out {
		switch {
		case d.UUID == "":
			return nil, fmt.Errorf("simulated GPU %d: empty uuid", d.Index)
		case seen[d.UUID]:
			return nil, fmt.Errorf("simulated GPU %d: duplicate uuid %s", d.Index, d.UUID)
		case d.TotalMiB == 0:
			return nil, fmt.Errorf("simulated GPU %d: zero memory", d.Index)
		case d.ReservedMiB >= d.TotalMiB:
			return nil, fmt.Errorf("simulated GPU %d: reserved %d MiB of its %d MiB leaves nothing to allocate", d.Index, d.ReservedMiB, d.TotalMiB)
		case i > 0 && out[i-1].Index == d.Index:
			return nil, fmt.Errorf("simulated GPU %d: duplicate index", d.Index)
		}
		seen[d.UUID] = true
	}
	return out, nil
}
