package cli

import (
	"testing"

	"github.com/gpusched/gpusched/pkg/api"
)

func TestGPUsTable(t *testing.T) {
	util, power := 35, 251.6
	gpus := []api.GPU{
		{Index: 0, UUID: "GPU-aaaa", Name: "H100", TotalMiB: 81920, UsedMiB: 12800, FreeMiB: 69120,
			UtilPercent: &util, PowerWatts: &power,
			Processes: []api.GPUProcess{{PID: 4242, UsedMiB: 12288, Managed: "train"}, {PID: 99, UsedMiB: 512}}},
		{Index: 1, UUID: "GPU-bbbb", Name: "sim", TotalMiB: 1000, FreeMiB: 1000, Processes: []api.GPUProcess{}},
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodGPUs: answer(result(api.GPUsResult{GPUs: gpus}))})
	out, errOut, code := ctl(t, d, "gpus")
	if code != 0 || errOut != "" {
		t.Fatalf("code %d, stderr %q", code, errOut)
	}
	want := "" +
		"INDEX  UUID      NAME  USED/TOTAL         FREE      UTIL  POWER  PROCS\n" +
		"0      GPU-aaaa  H100  12.5 GiB/80.0 GiB  67.5 GiB  35%   252W   2\n" +
		"1      GPU-bbbb  sim   0 MiB/1000 MiB     1000 MiB  -     -      0\n"
	if out != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
}
