package simgpu

import (
	"errors"
	"fmt"
	"sort"
)

// Device is one simulated GPU as listed in gpus.json. MIG marks a GPU in
// MIG mode.
//
// ReservedMiB is the memory the driver sets aside for itself: NVML counts
// it in the device's total and used memory (nvmlMemory_t: "total physical
// device memory", used "sum of reserved and allocated"; nvmlMemory_v2_t
// lists it as "reserved ... for system use (driver or firmware)", see
// docs.nvidia.com/deploy/nvml-api), while cuMemGetInfo leaves it out of
// its total and no process can allocate it.
//
// ContextMiB is what a CUDA context costs the process that creates it: the
// driver allocates it on the device, so NVML counts it in the process's
// and the device's used memory and cuMemGetInfo as used, like any
// allocation. The sim filler backend allocates it when it opens the device,
// as cuDevicePrimaryCtxRetain does; gpusched-simjob does not model it.
//
// Both vary by GPU, driver and (for the context) the libraries a process
// loads. Measured on an H200 with driver 580.159.04: NVML's total 143771
// MiB, of which 616 reserved (cuMemGetInfo's total: 143155), and 518 MiB
// for a bare primary context (a PyTorch process's context and allocator
// take more). Both default to 0.
type Device struct {
	Index       int    `json:"index"`
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	TotalMiB    uint64 `json:"total_mib"`
	ReservedMiB uint64 `json:"reserved_mib,omitempty"`
	ContextMiB  uint64 `json:"context_mib,omitempty"`
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
		case d.ContextMiB >= d.CUDATotalMiB():
			return nil, fmt.Errorf("simulated GPU %d: a %d MiB context leaves nothing of its %d MiB to allocate", d.Index, d.ContextMiB, d.CUDATotalMiB())
		case i > 0 && out[i-1].Index == d.Index:
			return nil, fmt.Errorf("simulated GPU %d: duplicate index", d.Index)
		}
		seen[d.UUID] = true
	}
	return out, nil
}
