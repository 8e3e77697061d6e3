package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// TestGPUCheckProtocol: --gpu-check prints READY once the memory is held and
// answers SIGUSR1 as scripts/gpu-check/workload.py does, failing while the
// process is checkpointed and when its VRAM is not all back.
func TestGPUCheckProtocol(t *testing.T) {
	reg := newSim(t, 1, 4096)
	j := startJob(t, reg, "0", "--gpu-check", "--vram", "512", "--host-mem", "4")
	pid := j.cmd.Process.Pid
	if got, want := j.waitLine(t, "READY "), fmt.Sprintf("READY %d 0.5", pid); got != want {
		t.Fatalf("ready line %q, want %q", got, want)
	}
	verify := func() string {
		t.Helper()
		j.signal(t, syscall.SIGUSR1)
		return j.waitLine(t, "VERIFY ")
	}
	if got, want := verify(), "VERIFY OK 512 MiB of simulated VRAM, 4 MiB of host memory"; got != want {
		t.Fatalf("verify: %q, want %q", got, want)
	}

	if err := reg.LockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.CheckpointProcess(pid); err != nil {
		t.Fatal(err)
	}
	if got := verify(); got != "VERIFY FAIL CUDA state checkpointed" {
		t.Errorf("verify while checkpointed: %q", got)
	}
	if _, err := reg.RestoreProcess(context.Background(), pid, nil); err != nil {
		t.Fatal(err)
	}
	if err := reg.UnlockProcess(pid); err != nil {
		t.Fatal(err)
	}
	if got := verify(); !strings.HasPrefix(got, "VERIFY OK ") {
		t.Errorf("verify after restore: %q", got)
	}

	start, err := procfs.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Free(pid, start, simgpu.DeviceUUID(0), 256); err != nil {
		t.Fatal(err)
	}
	if got, want := verify(), "VERIFY FAIL 256 MiB of simulated VRAM on the GPUs, want 512"; got != want {
		t.Errorf("verify with VRAM lost: %q, want %q", got, want)
	}
}
