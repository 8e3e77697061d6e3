package cli

import (
	"strings"
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestGPUsTable(t *testing.T) {
	util, power, limit, temp, hot := 35, 251.6, 700.0, 64, 95
	gpus := []api.GPU{
		{Index: 0, UUID: "GPU-aaaa", Name: "H100", TotalMiB: 81920, UsedMiB: 12800, FreeMiB: 69120,
			UtilPercent: &util, PowerWatts: &power, PowerLimitWatts: &limit, TempC: &temp,
			Driver: "550.54.15", Checkpoint: "api", Healthy: true, Unhealthy: []string{}, Leases: []string{"l1", "l3"},
			Processes: []api.GPUProcess{{PID: 4242, UsedMiB: 12288, Managed: "train"}, {PID: 99, UsedMiB: 512}}},
		{Index: 1, UUID: "GPU-bbbb", Name: "H100", TotalMiB: 81920, FreeMiB: 81920, PowerLimitWatts: &limit, TempC: &hot,
			Driver: "550.54.15", Checkpoint: "api", Unhealthy: []string{"GPU 1: temperature 95 C is above --max-temp 85"},
			Leases: []string{}, FrozenMiB: 1536, Processes: []api.GPUProcess{},
			Filler: &api.Filler{Index: 1, User: "ana", TargetMiB: 77824, HeldMiB: 77568}},
		{Index: 2, UUID: "GPU-cccc", Name: "sim", TotalMiB: 1000, FreeMiB: 1000, Healthy: true,
			Unhealthy: []string{}, Leases: []string{}, Processes: []api.GPUProcess{}},
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodGPUs: answer(result(api.GPUsResult{GPUs: gpus}))})
	out, errOut, code := ctl(t, d, "gpus")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"INDEX  NAME  MEMORY             UTIL  POWER      TEMP  HEALTH     LEASES  FROZEN   FILLER                   PROCS\n" +
		"0      H100  12.5 GiB/80.0 GiB  35%   252W/700W  64C   ok         l1,l3   -        -                        2\n" +
		"1      H100  0 MiB/80.0 GiB     -     -/700W     95C   unhealthy  -       1.5 GiB  75.8 GiB/76.0 GiB (ana)  0\n" +
		"2      sim   0 MiB/1000 MiB     -     -          -     ok         -       -        -                        0\n" +
		"GPU 1: temperature 95 C is above --max-temp 85\n" +
		"driver 550.54.15, checkpoint driver api\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}

// TestGPUsProcs: --procs lists each GPU's processes after the table, a
// figure the GPU does not give as "-".
func TestGPUsProcs(t *testing.T) {
	gpus := []api.GPU{
		{Index: 0, Name: "H100", TotalMiB: 81920, UsedMiB: 12800, Healthy: true,
			Processes: []api.GPUProcess{{PID: 4242, UsedMiB: 12288, UtilPercent: intp(87), Managed: "train"}, {PID: 99, UsedMiB: 512, UtilPercent: intp(0)}}},
		{Index: 1, Name: "H100", TotalMiB: 81920, Healthy: true, Processes: []api.GPUProcess{}},
		{Index: 2, Name: "H100", TotalMiB: 81920, UsedMiB: 2048, Healthy: true,
			Processes: []api.GPUProcess{{PID: 4343, UsedMiB: 2048, Managed: "eval"}}},
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodGPUs: answer(result(api.GPUsResult{GPUs: gpus}))})
	out, errOut, code := ctl(t, d, "gpus", "--procs")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "\n" +
		"GPU  PID   MANAGED  MEMORY    UTIL\n" +
		"0    4242  train    12.0 GiB  87%\n" +
		"0    99    -        512 MiB   0%\n" +
		"2    4343  eval     2.0 GiB   -\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("got\n%s\nwant it to end with\n%s", out, want)
	}
	if out, _, _ := ctl(t, d, "gpus"); strings.Contains(out, "PID") {
		t.Errorf("without --procs the processes are listed:\n%s", out)
	}
}

// TestGPUsTableEmpty: no GPUs is a header alone.
func TestGPUsTableEmpty(t *testing.T) {
	d := newFakeDaemon(t, map[string]handler{api.MethodGPUs: answer(result(api.GPUsResult{GPUs: []api.GPU{}}))})
	out, errOut, code := ctl(t, d, "gpus")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if want := "INDEX  NAME  MEMORY  UTIL  POWER  TEMP  HEALTH  LEASES  FROZEN  FILLER  PROCS\n"; out != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

// TestGPUsDriverWarning: a known problem of the driver follows the driver
// line.
func TestGPUsDriverWarning(t *testing.T) {
	const warning = `driver 570 cannot checkpoint PyTorch processes (NVIDIA/cuda-checkpoint#34)`
	gpus := []api.GPU{{Index: 0, Name: "H100", TotalMiB: 1024, FreeMiB: 1024, Driver: "570.86.10", Checkpoint: "cli",
		DriverWarning: warning, Healthy: true, Unhealthy: []string{}, Leases: []string{}, Processes: []api.GPUProcess{}}}
	d := newFakeDaemon(t, map[string]handler{api.MethodGPUs: answer(result(api.GPUsResult{GPUs: gpus}))})
	out, errOut, code := ctl(t, d, "gpus")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	if want := "driver 570.86.10, checkpoint driver cli\nwarning: " + warning + "\n"; !strings.HasSuffix(out, want) {
		t.Errorf("got\n%s\nwant it to end with\n%s", out, want)
	}
}
