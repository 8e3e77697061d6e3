package main

import (
	"fmt"

	"github.com/gpusched/gpusched/internal/simgpu"
)

// With --gpu-check the job stands in for scripts/gpu-check/workload.py in
// the hardware check's dry run and speaks its protocol: "READY <host pid>
// <GiB>" once the memory is held, and one "VERIFY OK ..." or "VERIFY FAIL
// ..." line per SIGUSR1.

// ready prints the READY line.
func (j *job) ready() {
	j.printf("READY %d %g", j.pid, float64(j.cfg.vramMiB)/1024)
}

// verifyLine checks what a freeze, thaw, migrate or hibernate must keep: the
// host memory pattern, the process's CUDA state back to running, and all its
// simulated VRAM back on a GPU (after a migrate, on another one).
func (j *job) verifyLine() string {
	if j.mem != nil {
		if err := j.mem.verify(); err != nil {
			return "VERIFY FAIL " + err.Error()
		}
	}
	var held uint64
	if v := j.vram; v != nil {
		v.follow()
		state, err := v.reg.CheckpointState(v.pid)
		if err != nil {
			return "VERIFY FAIL error: " + err.Error()
		}
		if state != simgpu.StateRunning {
			return "VERIFY FAIL CUDA state " + state
		}
		snap, err := v.reg.Snapshot()
		if err != nil {
			return "VERIFY FAIL error: " + err.Error()
		}
		for _, p := range snap.Procs {
			if p.PID == v.pid {
				held += p.UsedMiB
			}
		}
		if want := v.held * uint64(len(v.devs)); held != want {
			return fmt.Sprintf("VERIFY FAIL %d MiB of simulated VRAM on the GPUs, want %d", held, want)
		}
	}
	return fmt.Sprintf("VERIFY OK %d MiB of simulated VRAM, %d MiB of host memory", held, j.cfg.hostMiB)
}
