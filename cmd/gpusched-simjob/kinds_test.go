package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpusched/gpusched/internal/cudakind"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// TestKinds: --nccl joins the simulated NCCL group (a peer's lock waits on
// it) and maps what an NCCL rank maps, --uvm what a process with managed
// memory maps, every file unlinked; SIGTERM reports the CUDA state.
func TestKinds(t *testing.T) {
	reg := newSim(t, 1, 1024)
	rank := startJob(t, reg, "0", "--vram", "10", "--nccl", "job")
	rank.waitLine(t, "simjob: allocated")
	plain := startJob(t, reg, "0", "--vram", "10", "--nccl", "job", "--nccl-shm=false", "--uvm")
	plain.waitLine(t, "simjob: allocated")

	for _, c := range []struct {
		j    *simjob
		want cudakind.Kind
	}{
		{rank, cudakind.Kind{NCCL: true, NCCLShared: true}},
		{plain, cudakind.Kind{NCCL: true, UVM: true}},
	} {
		pid := c.j.cmd.Process.Pid
		if k, err := cudakind.Inspect(pid); err != nil || k != c.want {
			t.Errorf("job %d: kind %+v, %v; want %+v", pid, k, err, c.want)
		}
		maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(maps), "\n") {
			if f := strings.Fields(line); len(f) >= 6 && (strings.Contains(line, "/simjob-map-") || strings.Contains(line, "/dev/shm/nccl-")) {
				path := strings.TrimSuffix(strings.Join(f[5:], " "), " (deleted)")
				if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("job %d left %s behind (%v)", pid, path, err)
				}
			}
		}
	}

	if err := reg.LockProcess(rank.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := reg.LockProcessContext(ctx, plain.cmd.Process.Pid, 0); !errors.Is(err, simgpu.ErrTimeout) {
		t.Errorf("lock of a peer of a locked rank: %v, want ErrTimeout", err)
	}

	rank.signal(t, syscall.SIGTERM)
	rank.waitLine(t, "simjob: SIGTERM with CUDA locked")
	plain.signal(t, syscall.SIGTERM)
	plain.waitLine(t, "simjob: SIGTERM with CUDA running")
}
