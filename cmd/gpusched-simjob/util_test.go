package main

import (
	"io"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/simgpu"
)

func TestParseUtil(t *testing.T) {
	if cfg, err := parseFlags([]string{"--vram", "64", "--util", "40"}, io.Discard); err != nil || cfg.util != 40 {
		t.Errorf("--util 40: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"--vram", "64", "--util", "101"}, {"--vram", "64", "--util", "-1"}, {"--util", "10"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

// TestUtilShowsOnItsGPUs: a job with --util makes its GPUs as busy while
// it holds memory on them; once it ended, nothing is known of them again.
func TestUtilShowsOnItsGPUs(t *testing.T) {
	reg := newSim(t, 2, 4096)
	j := startJob(t, reg, "1", "--vram", "512", "--util", "70")
	j.waitLine(t, "simjob: allocated 512 MiB")
	if got := deviceUtils(t, reg); got != [2]int{-1, 70} {
		t.Errorf("utilization while it holds memory on GPU 1: %v", got)
	}
	j.signal(t, syscall.SIGTERM)
	j.wait(t)
	if got := deviceUtils(t, reg); got != [2]int{-1, -1} {
		t.Errorf("utilization after it ended: %v", got)
	}
	assertNoRecords(t, reg)
}

// deviceUtils is the utilization of a two-GPU registry's devices, -1 when
// unknown.
func deviceUtils(t *testing.T, reg *simgpu.Registry) [2]int {
	t.Helper()
	snap, err := reg.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	out := [2]int{-1, -1}
	for i, d := range snap.Devices {
		if d.Metrics.UtilPercent != nil {
			out[i] = *d.Metrics.UtilPercent
		}
	}
	return out
}
