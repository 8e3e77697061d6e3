package gpu

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestNewNVMLWithoutDriver(t *testing.T) {
	n, err := NewNVML()
	if err == nil {
		_ = n.Close()
		t.Skip("an NVIDIA driver is present")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("NewNVML() = %v, want ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "--sim") || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Errorf("error %q should name libnvidia-ml.so.1 and --sim", err)
	}
}

// fakeLib is a hand-written NVML: the methods the backend uses are defined
// here, any other would panic on the nil embedded interface.
type fakeLib struct {
	nvml.Interface
	initRet   nvml.Return
	driver    string
	driverRet nvml.Return
	devices   []*fakeDevice
	countRet  nvml.Return
	shutdown  int
}

func (f *fakeLib) Init() nvml.Return                  { return f.initRet }
func (f *fakeLib) Shutdown() nvml.Return              { f.shutdown++; return nvml.SUCCESS }
func (f *fakeLib) DeviceGetCount() (int, nvml.Return) { return len(f.devices), f.countRet }
func (f *fakeLib) SystemGetDriverVersion() (string, nvml.Return) {
	return f.driver, f.driverRet
}
func (f *fakeLib) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if f.devices[i].handleRet != nvml.SUCCESS {
		return nil, f.devices[i].handleRet
	}
	return f.devices[i], nvml.SUCCESS
}

type fakeDevice struct {
	nvml.Device
	handleRet nvml.Return
	uuid      string
	mem       nvml.Memory
	memRet    nvml.Return
	util      uint32
	utilRet   nvml.Return
	powerMW   uint32
	powerRet  nvml.Return
	limitMW   uint32
	limitRet  nvml.Return
	tempC     uint32
	tempRet   nvml.Return
	compute   []nvml.ProcessInfo
	graphics  []nvml.ProcessInfo
	gfxRet    nvml.Return
	mig       int
	migRet    nvml.Return
	// procUtil are the driver's per-process utilization samples, and
	// procUtilRet what their query answers other than by NVML's rules
	// (procutil.go): set, it is returned with no samples.
	procUtil    []nvml.ProcessUtilizationSample
	procUtilRet nvml.Return
	lastSeen    []uint64 // the lastSeenTimeStamp of each query
}

func (d *fakeDevice) GetMigMode() (int, int, nvml.Return) {
	return d.mig, nvml.DEVICE_MIG_DISABLE, d.migRet
}

func (d *fakeDevice) GetUUID() (string, nvml.Return)            { return d.uuid, nvml.SUCCESS }
func (d *fakeDevice) GetName() (string, nvml.Return)            { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
func (d *fakeDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) { return d.mem, d.memRet }
func (d *fakeDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return nvml.Utilization{Gpu: d.util}, d.utilRet
}
func (d *fakeDevice) GetPowerUsage() (uint32, nvml.Return) { return d.powerMW, d.powerRet }
func (d *fakeDevice) GetPowerManagementLimit() (uint32, nvml.Return) {
	return d.limitMW, d.limitRet
}
func (d *fakeDevice) GetTemperature(sensor nvml.TemperatureSensors) (uint32, nvml.Return) {
	if sensor != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.tempC, d.tempRet
}
func (d *fakeDevice) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	d.lastSeen = append(d.lastSeen, lastSeen)
	if d.procUtilRet != nvml.SUCCESS {
		return nil, d.procUtilRet
	}
	var out []nvml.ProcessUtilizationSample
	for _, s := range d.procUtil {
		if s.TimeStamp > lastSeen {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}
func (d *fakeDevice) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.compute, nvml.SUCCESS
}
func (d *fakeDevice) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.graphics, d.gfxRet
}

const mib = 1 << 20

func TestNVMLInitErrors(t *testing.T) {
	for ret, noDriver := range map[nvml.Return]bool{
		nvml.ERROR_LIBRARY_NOT_FOUND: true,
		nvml.ERROR_DRIVER_NOT_LOADED: true,
		nvml.ERROR_NO_PERMISSION:     false,
	} {
		_, err := newNVML(&fakeLib{initRet: ret})
		if err == nil || errors.Is(err, ErrNoDriver) != noDriver {
			t.Errorf("Init %v: error %v, want ErrNoDriver=%v", ret, err, noDriver)
		}
		if !noDriver && !errors.Is(err, ret) {
			t.Errorf("Init %v: error %v does not wrap the NVML result", ret, err)
		}
	}
}

func TestNVMLSample(t *testing.T) {
	lib := &fakeLib{driver: "550.54.15", devices: []*fakeDevice{
		{
			uuid: "GPU-aaaa", mem: nvml.Memory{Total: 81559 * mib, Used: 4096*mib + 5},
			util: 37, powerMW: 123456, limitMW: 700000, tempC: 64,
			compute:  []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: 3000 * mib}, {Pid: 100, UsedGpuMemory: notAvailable}},
			graphics: []nvml.ProcessInfo{{Pid: 200, UsedGpuMemory: 1000 * mib}},
		},
		{
			uuid: "GPU-bbbb", mem: nvml.Memory{Total: 1024 * mib},
			utilRet: nvml.ERROR_NOT_SUPPORTED, powerRet: nvml.ERROR_NOT_SUPPORTED, gfxRet: nvml.ERROR_NOT_SUPPORTED,
			limitRet: nvml.ERROR_NOT_SUPPORTED, tempRet: nvml.ERROR_NOT_SUPPORTED,
			compute: []nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: 512 * mib}},
		},
	}}
	n, err := newNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	if n.Name() != "nvml" {
		t.Errorf("Name() = %q", n.Name())
	}
	s, err := n.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := s.Devices[0], s.Devices[1]
	if d0.Index != 0 || d0.UUID != "GPU-aaaa" || d0.TotalMiB != 81559 || d0.UsedMiB != 4096 {
		t.Errorf("device 0 = %+v", d0)
	}
	if d0.UtilPercent == nil || *d0.UtilPercent != 37 || d0.PowerWatts == nil || *d0.PowerWatts != 123.456 {
		t.Errorf("device 0 metrics = %v, %v", d0.UtilPercent, d0.PowerWatts)
	}
	if d0.PowerLimitWatts == nil || *d0.PowerLimitWatts != 700 || d0.TempC == nil || *d0.TempC != 64 {
		t.Errorf("device 0 power limit, temperature = %v, %v", d0.PowerLimitWatts, d0.TempC)
	}
	if d1.Index != 1 || d1.UtilPercent != nil || d1.PowerWatts != nil || d1.PowerLimitWatts != nil || d1.TempC != nil {
		t.Errorf("device 1 unsupported metrics = %+v", d1)
	}
	if s.Driver != "550.54.15" {
		t.Errorf("driver = %q", s.Driver)
	}
	want := "[100 on GPU-aaaa: 0 MiB, 0% | 200 on GPU-aaaa: 3000 MiB, 0% | 300 on GPU-bbbb: 512 MiB, 0%]"
	if got := procsString(s.Procs); got != want {
		t.Errorf("procs = %s, want %s", got, want)
	}
	if err := n.Close(); err != nil || lib.shutdown != 1 {
		t.Errorf("Close() = %v, shutdowns %d", err, lib.shutdown)
	}
}

// TestNVMLDriverVersionUnknown: a driver that cannot say its version
// still samples, with no version.
func TestNVMLDriverVersionUnknown(t *testing.T) {
	lib := &fakeLib{driverRet: nvml.ERROR_NOT_SUPPORTED, devices: []*fakeDevice{{uuid: "GPU-aaaa", mem: nvml.Memory{Total: mib}}}}
	n, err := newNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	s, err := n.Sample(context.Background())
	if err != nil || s.Driver != "" {
		t.Errorf("Sample() = driver %q, %v; want no version, no error", s.Driver, err)
	}
}

// TestNVMLMetricErrors: a metric that fails other than by being
// unsupported marks its device with an error naming the metric, and the
// other devices are still sampled.
func TestNVMLMetricErrors(t *testing.T) {
	for _, tt := range []struct {
		what string
		dev  fakeDevice
	}{
		{"power limit", fakeDevice{limitRet: nvml.ERROR_GPU_IS_LOST}},
		{"temperature", fakeDevice{tempRet: nvml.ERROR_UNKNOWN}},
		{"memory info", fakeDevice{memRet: nvml.ERROR_GPU_IS_LOST}},
		{"MIG mode", fakeDevice{migRet: nvml.ERROR_GPU_IS_LOST}},
	} {
		dev := tt.dev
		dev.uuid = "GPU-bbbb"
		if dev.memRet == nvml.SUCCESS {
			dev.mem = nvml.Memory{Total: mib}
		}
		good := &fakeDevice{uuid: "GPU-aaaa", mem: nvml.Memory{Total: 2 * mib, Used: mib}}
		n, err := newNVML(&fakeLib{devices: []*fakeDevice{good, &dev}})
		if err != nil {
			t.Fatal(err)
		}
		s, err := n.Sample(context.Background())
		if err != nil {
			t.Fatalf("%s: Sample() error = %v, want the failure on the device", tt.what, err)
		}
		if len(s.Devices) != 2 || s.Devices[0].Err != "" || s.Devices[0].UsedMiB != 1 {
			t.Fatalf("%s: devices = %+v", tt.what, s.Devices)
		}
		if d := s.Devices[1]; d.UUID != "GPU-bbbb" || d.Index != 1 || !strings.Contains(d.Err, tt.what) {
			t.Errorf("%s: failing device = %+v, want its uuid and an error naming the metric", tt.what, d)
		}
	}
}

// TestNVMLSampleErrors: a failed device count fails the sample; a device
// that cannot be identified is left out, the others are listed.
func TestNVMLSampleErrors(t *testing.T) {
	lib := &fakeLib{countRet: nvml.ERROR_UNKNOWN, devices: []*fakeDevice{{uuid: "GPU-aaaa", mem: nvml.Memory{Total: mib}}}}
	n, err := newNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Sample(context.Background()); !errors.Is(err, nvml.ERROR_UNKNOWN) || !strings.Contains(err.Error(), "device count") {
		t.Errorf("Sample() error = %v, want the device count's error", err)
	}
	lib.countRet = nvml.SUCCESS
	lib.devices = append(lib.devices, &fakeDevice{handleRet: nvml.ERROR_GPU_IS_LOST},
		&fakeDevice{uuid: "GPU-cccc", mem: nvml.Memory{Total: mib}})
	s, err := n.Sample(context.Background())
	if err != nil || len(s.Devices) != 2 || s.Devices[0].UUID != "GPU-aaaa" || s.Devices[1].UUID != "GPU-cccc" || s.Devices[1].Index != 2 {
		t.Errorf("Sample() = %+v, %v; want GPU 0 and GPU 2, the lost GPU 1 left out", s.Devices, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := n.Sample(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Sample(canceled) = %v", err)
	}
}

// TestNVMLMigMode: a GPU whose current MIG mode is enabled is marked MIG;
// one that does not support MIG (before Ampere) is not.
func TestNVMLMigMode(t *testing.T) {
	lib := &fakeLib{devices: []*fakeDevice{
		{uuid: "GPU-aaaa", mem: nvml.Memory{Total: mib}, mig: nvml.DEVICE_MIG_ENABLE},
		{uuid: "GPU-bbbb", mem: nvml.Memory{Total: mib}, mig: nvml.DEVICE_MIG_DISABLE},
		{uuid: "GPU-cccc", mem: nvml.Memory{Total: mib}, migRet: nvml.ERROR_NOT_SUPPORTED},
	}}
	n, err := newNVML(lib)
	if err != nil {
		t.Fatal(err)
	}
	s, err := n.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false} {
		if d := s.Devices[i]; d.MIG != want || d.Err != "" {
			t.Errorf("device %d = %+v, want MIG %v", i, d, want)
		}
	}
}

// procsString shows procs as "PID on UUID: N MiB, U%" (U "?" when
// unknown), joined by " | " in brackets.
func procsString(procs []ProcUsage) string {
	parts := make([]string, 0, len(procs))
	for _, p := range procs {
		util := "?"
		if p.UtilPercent != nil {
			util = fmt.Sprint(*p.UtilPercent, "%")
		}
		parts = append(parts, fmt.Sprintf("%d on %s: %d MiB, %s", p.PID, p.UUID, p.UsedMiB, util))
	}
	return "[" + strings.Join(parts, " | ") + "]"
}

// TestNVMLProcessUtilization: each process's own utilization is the
// highest figure of its samples since the last read of its device (one
// with none was idle, which NVML answers as NOT_FOUND), a value past 100
// counts as 100, and a device that cannot tell leaves it unknown.
func TestNVMLProcessUtilization(t *testing.T) {
	busy := &fakeDevice{uuid: "GPU-aaaa", mem: nvml.Memory{Total: 81559 * mib},
		compute: []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: mib}, {Pid: 200, UsedGpuMemory: mib}, {Pid: 300, UsedGpuMemory: mib}},
		procUtil: []nvml.ProcessUtilizationSample{
			{Pid: 200, TimeStamp: 10, SmUtil: 40},
			{Pid: 200, TimeStamp: 20, MemUtil: 5},
			{Pid: 300, TimeStamp: 15, SmUtil: 2147483632},
		}}
	old := &fakeDevice{uuid: "GPU-bbbb", mem: nvml.Memory{Total: 1024 * mib}, procUtilRet: nvml.ERROR_NOT_SUPPORTED,
		compute: []nvml.ProcessInfo{{Pid: 400, UsedGpuMemory: mib}}}
	n, err := newNVML(&fakeLib{devices: []*fakeDevice{busy, old}})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{
		"[100 on GPU-aaaa: 1 MiB, 0% | 200 on GPU-aaaa: 1 MiB, 40% | 300 on GPU-aaaa: 1 MiB, 100% | 400 on GPU-bbbb: 1 MiB, ?]",
		"[100 on GPU-aaaa: 1 MiB, 0% | 200 on GPU-aaaa: 1 MiB, 0% | 300 on GPU-aaaa: 1 MiB, 0% | 400 on GPU-bbbb: 1 MiB, ?]",
		"[100 on GPU-aaaa: 1 MiB, 7% | 200 on GPU-aaaa: 1 MiB, 0% | 300 on GPU-aaaa: 1 MiB, 0% | 400 on GPU-bbbb: 1 MiB, ?]",
	} {
		if i == 2 {
			busy.procUtil = append(busy.procUtil, nvml.ProcessUtilizationSample{Pid: 100, TimeStamp: 25, SmUtil: 7})
		}
		s, err := n.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if got := procsString(s.Procs); got != want {
			t.Errorf("sample %d: %s, want %s", i, got, want)
		}
	}
	if want := "[0 20 20]"; fmt.Sprint(busy.lastSeen) != want {
		t.Errorf("lastSeenTimeStamp of each query: %v, want %s", busy.lastSeen, want)
	}
}
