package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/simgpu"
)

func TestParseMemLimits(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // fmt of the map, or the error's text
		bad  bool
	}{
		{in: "0=8G", want: "map[0:8192]"},
		{in: "0=8192M", want: "map[0:8192]"},
		{in: "0=1G,1=512MB", want: "map[0:1024 1:512]"},
		{in: " 1 = 2g , 0=1t ", want: "map[0:1048576 1:2048]"},
		{in: "0=1536K", want: "map[0:1]"},
		{in: "0=4096mb,", want: "map[0:4096]"},
		{in: "", want: "map[]"},
		{in: "8G", bad: true, want: "want ORDINAL=SIZE"},
		{in: "x=8G", bad: true, want: "device ordinal"},
		{in: "-1=8G", bad: true, want: "device ordinal"},
		{in: "0=8G,0=4G", bad: true, want: "given twice"},
		{in: "0=8192", bad: true, want: "with a unit"},
		{in: "0=8X", bad: true, want: "with a unit"},
		{in: "0=G", bad: true, want: "not a whole number"},
		{in: "0=512K", bad: true, want: "below 1 MiB"},
		{in: "0=99999999999T", bad: true, want: "too large"},
	} {
		got, err := parseMemLimits(tc.in)
		switch {
		case tc.bad && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("parseMemLimits(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.want)
		case !tc.bad && (err != nil || fmt.Sprint(got) != tc.want):
			t.Errorf("parseMemLimits(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

// TestMPSLimitCapsAllocation: the pinned memory limit of device ordinal 0
// (the first GPU of CUDA_VISIBLE_DEVICES) caps the job there, with the
// PyTorch out-of-memory line, though the GPU has room; under the limit it
// allocates.
func TestMPSLimitCapsAllocation(t *testing.T) {
	reg := newSim(t, 2, 16384)
	gpu0, gpu1 := simgpu.DeviceUUID(0), simgpu.DeviceUUID(1)
	mpsEnv := []string{envMPSThreads + "=50", envMPSMemLimit + "=0=4G,1=8G"}

	over := newJob(reg, gpu1+","+gpu0, "--vram", "6144")
	over.cmd.Env = append(over.cmd.Env, mpsEnv...)
	if err := over.start(t); err != nil {
		t.Fatal(err)
	}
	over.waitLine(t, "simjob: mps threads=50")
	over.waitLine(t, "simjob: mps mem limit 4096 MiB on "+gpu1)
	over.waitLine(t, "simjob: mps mem limit 8192 MiB on "+gpu0)
	if ws := over.wait(t); ws.ExitStatus() != 1 {
		t.Fatalf("6 GiB under a 4 GiB limit: %v, want exit 1; stderr %s", ws, over.stderr.String())
	}
	if s := over.stderr.String(); !strings.Contains(s, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6144 MiB. GPU 0") ||
		!strings.Contains(s, "MPS memory limit of 4096 MiB") {
		t.Errorf("stderr %q", s)
	}
	assertNoRecords(t, reg)

	under := newJob(reg, gpu1+","+gpu0, "--vram", "3072", "--hold", "0.01")
	under.cmd.Env = append(under.cmd.Env, mpsEnv...)
	if err := under.start(t); err != nil {
		t.Fatal(err)
	}
	under.waitLine(t, "simjob: allocated 3072 MiB on "+gpu1)
	if ws := under.wait(t); ws.ExitStatus() != 0 {
		t.Fatalf("3 GiB under a 4 GiB limit: %v; stderr %s", ws, under.stderr.String())
	}
	assertNoRecords(t, reg)
}

func TestMPSEnvErrors(t *testing.T) {
	reg := newSim(t, 1, 4096)
	for _, env := range [][]string{
		{envMPSThreads + "=0"},
		{envMPSThreads + "=101"},
		{envMPSMemLimit + "=0=lots"},
		{envMPSMemLimit + "=1=1G"}, // only one GPU is visible
	} {
		j := newJob(reg, "0", "--vram", "64")
		j.cmd.Env = append(j.cmd.Env, env...)
		if err := j.start(t); err != nil {
			t.Fatal(err)
		}
		if ws := j.wait(t); ws.ExitStatus() != 2 || !strings.Contains(j.stderr.String(), "CUDA_MPS_") {
			t.Errorf("%v: %v, stderr %q; want exit 2 naming the variable", env, ws, j.stderr.String())
		}
	}
	assertNoRecords(t, reg)
}
