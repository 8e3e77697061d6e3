package gpu

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// helperEnv makes the re-executed test binary wait for stdin to close: a
// real process to register usage for.
const helperEnv = "GPU_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		_, _ = bufio.NewReader(os.Stdin).ReadString(0)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestSimSample(t *testing.T) {
	sim, err := NewSim(t.TempDir(), SimSpec{Count: 2, SizeMiB: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if sim.Name() != "sim" {
		t.Errorf("Name() = %q", sim.Name())
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	pid := cmd.Process.Pid

	// The job side opens the directory by name, as a simulated job would.
	reg, err := simgpu.Open(sim.Dir())
	if err != nil {
		t.Fatal(err)
	}
	st, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Allocate(pid, st, simgpu.DeviceUUID(1), 3000); err != nil {
		t.Fatal(err)
	}

	s, err := sim.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Devices) != 2 || s.Devices[0].UsedMiB != 0 || s.Devices[1].UsedMiB != 3000 || s.Devices[1].TotalMiB != 8192 {
		t.Errorf("devices = %+v", s.Devices)
	}
	if d := s.Devices[1]; d.Index != 1 || d.UUID != simgpu.DeviceUUID(1) || d.Name != simgpu.DefaultName || d.UtilPercent != nil || d.PowerWatts != nil {
		t.Errorf("device 1 = %+v", d)
	}
	if want := fmt.Sprintf("[%d on %s: 3000 MiB, 0%%]", pid, simgpu.DeviceUUID(1)); procsString(s.Procs) != want {
		t.Errorf("procs = %v, want %s", s.Procs, want)
	}

	// The process dies without releasing: its usage disappears.
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	s, err = sim.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Procs) != 0 || s.Devices[1].UsedMiB != 0 {
		t.Errorf("dead process still counted: %+v", s)
	}
}

func TestNewSimRejectsBadSizes(t *testing.T) {
	if _, err := NewSim(t.TempDir(), SimSpec{Count: 0, SizeMiB: 1024}); err == nil {
		t.Error("NewSim with 0 GPUs succeeded")
	}
	if _, err := NewSim(t.TempDir(), SimSpec{Count: 1, SizeMiB: 0}); err == nil {
		t.Error("NewSim with 0 MiB succeeded")
	}
}

// TestSimMetrics: measurements set through the registry show in the next
// sample; devices without any report nil, and the driver is "sim".
func TestSimMetrics(t *testing.T) {
	sim, err := NewSim(t.TempDir(), SimSpec{Count: 2, SizeMiB: 8192})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	s, err := sim.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Driver != "sim" {
		t.Errorf("driver = %q, want sim", s.Driver)
	}
	for _, d := range s.Devices {
		if d.UtilPercent != nil || d.PowerWatts != nil || d.PowerLimitWatts != nil || d.TempC != nil {
			t.Errorf("GPU %d: metrics before any were set: %+v", d.Index, d)
		}
	}

	reg, err := simgpu.Open(sim.Dir())
	if err != nil {
		t.Fatal(err)
	}
	util, power, limit, temp := 88, 410.5, 450.0, 95
	if err := reg.SetMetrics(simgpu.DeviceUUID(0), simgpu.Metrics{UtilPercent: &util, PowerWatts: &power,
		PowerLimitWatts: &limit, TempC: &temp}); err != nil {
		t.Fatal(err)
	}
	if s, err = sim.Sample(context.Background()); err != nil {
		t.Fatal(err)
	}
	d0, d1 := s.Devices[0], s.Devices[1]
	if d0.UtilPercent == nil || *d0.UtilPercent != 88 || d0.PowerWatts == nil || *d0.PowerWatts != 410.5 ||
		d0.PowerLimitWatts == nil || *d0.PowerLimitWatts != 450 || d0.TempC == nil || *d0.TempC != 95 {
		t.Errorf("GPU 0 metrics = %v %v %v %v", d0.UtilPercent, d0.PowerWatts, d0.PowerLimitWatts, d0.TempC)
	}
	if d1.UtilPercent != nil || d1.PowerWatts != nil || d1.PowerLimitWatts != nil || d1.TempC != nil {
		t.Errorf("GPU 1 metrics set by GPU 0's: %+v", d1)
	}
}

// TestSimFaults: the sim directory's injected NVML failures come out of
// Sample as NVML's do: a failed sample, a device left out, a device with
// Err; clearing them restores the devices.
func TestSimFaults(t *testing.T) {
	dir := t.TempDir()
	sim, err := NewSim(dir, SimSpec{Count: 3, SizeMiB: 8192})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := simgpu.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.SetFaults(simgpu.Faults{Missing: []string{"GPU-nope"}}); err == nil {
		t.Error("SetFaults accepted an unknown device")
	}
	if err := reg.SetFaults(simgpu.Faults{SampleError: "GPU is lost"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Sample(context.Background()); !errors.Is(err, simgpu.ErrSampleFailed) || !strings.Contains(err.Error(), "GPU is lost") {
		t.Errorf("Sample() with a sample error = %v", err)
	}
	if err := reg.SetFaults(simgpu.Faults{Missing: []string{simgpu.DeviceUUID(1)},
		DeviceErrors: map[string]string{simgpu.DeviceUUID(2): "Unknown Error"}}); err != nil {
		t.Fatal(err)
	}
	s, err := sim.Sample(context.Background())
	if err != nil || len(s.Devices) != 2 || s.Devices[0].Err != "" || s.Devices[1].Index != 2 || s.Devices[1].Err != "Unknown Error" || s.Devices[1].TotalMiB != 8192 {
		t.Errorf("Sample() with GPU 1 missing, GPU 2 failing = %+v, %v", s.Devices, err)
	}
	if err := reg.SetFaults(simgpu.Faults{}); err != nil {
		t.Fatal(err)
	}
	if s, err := sim.Sample(context.Background()); err != nil || len(s.Devices) != 3 {
		t.Errorf("Sample() with faults cleared = %+v, %v", s.Devices, err)
	}
}

// TestSimReportsUntrustedOnce: a record another user wrote for a process
// not theirs is left out of the sample and listed in the first sample that
// sees it only.
func TestSimReportsUntrustedOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the record is written as another user")
	}
	dir := t.TempDir()
	sim, err := NewSim(dir, SimSpec{Count: 1, SizeMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	if err := sim.AddUser(nobody); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid() // root's
	st, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("%s/procs/%d/%d.json", dir, nobody, pid)
	rec := fmt.Sprintf(`{"pid":%d,"start_time":%d,"usage":{%q:500}}`, pid, st, simgpu.DeviceUUID(0))
	if err := os.WriteFile(path, []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		s, err := sim.Sample(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Procs) != 0 || len(s.Untrusted) != want {
			t.Errorf("sample %d: procs %+v, untrusted %q; want none and %d", i, s.Procs, s.Untrusted, want)
		}
	}
}

// TestSimMIG: a GPU created in MIG mode samples as NVML reports a GPU
// whose current MIG mode is enabled; the others do not.
func TestSimMIG(t *testing.T) {
	sim, err := NewSim(t.TempDir(), SimSpec{Count: 3, SizeMiB: 1024, MIG: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false} {
		if s.Devices[i].MIG != want {
			t.Errorf("GPU %d: MIG %v, want %v", i, s.Devices[i].MIG, want)
		}
	}
	if _, err := NewSim(t.TempDir(), SimSpec{Count: 1, SizeMiB: 1024, MIG: []int{1}}); err == nil {
		t.Error("NewSim took MIG mode for a GPU it does not have")
	}
}

// TestSimReserved: each GPU of a spec with a driver reserve reports it as
// used, as NVML does.
func TestSimReserved(t *testing.T) {
	sim, err := NewSim(t.TempDir(), SimSpec{Count: 2, SizeMiB: 4096, ReservedMiB: 616})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sim.Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Devices {
		if d.TotalMiB != 4096 || d.UsedMiB != 616 {
			t.Errorf("GPU %d: %d of %d MiB used, want 616 of 4096", d.Index, d.UsedMiB, d.TotalMiB)
		}
	}
}
