// Command cuda-checkpoint is a test stand-in for NVIDIA's cuda-checkpoint,
// acting on simulated GPUs (internal/simgpu) with the real tool's grammar,
// --help texts and error lines:
//
//	cuda-checkpoint --get-state --pid P         prints running|locked|checkpointed|failed
//	cuda-checkpoint --action lock --pid P [--timeout MS]
//	cuda-checkpoint --action checkpoint --pid P
//	cuda-checkpoint --action restore --pid P [--device-map GPU-a=GPU-b,...]
//	cuda-checkpoint --action unlock --pid P
//	cuda-checkpoint --get-restore-tid --pid P   prints P's restore thread id
//	cuda-checkpoint --toggle --pid P            running -> checkpointed -> running
//	cuda-checkpoint --help
//
// (-p, -t, -d and -h are the short flags.) It finds the sim directory in the
// target's environment (GPUSCHED_SIM_DIR in /proc/P/environ); without it the
// target is not a CUDA process. Success exits 0 silently (but for the
// queries). A failure prints the real tool's one line, ending in the
// CUresult's cuGetErrorString text in quotes (`Could not restore on process
// ID 1100100: "invalid argument"`, see fake.go), and exits with the CUresult
// cut to 8 bits as the kernel cuts it (CUDA_ERROR_TIMEOUT, 909, exits 141).
// Bad usage exits 2 with a usage line (the fake's own).
//
// As the real driver hangs on a process of an NCCL communicator while
// another one is locked (NVIDIA/cuda-checkpoint#30), a lock of a simulated
// NCCL group's member (simgpu.SetNCCL) waits while another member is
// locked or checkpointed, and past --timeout fails with CUDA_ERROR_TIMEOUT.
//
// Faults are injected through faults.json in the directory of argv[0] (tests
// symlink the built fake into a per-test directory), shaped as
//
//	{"lock": {"delay_ms": 100, "error": "CUDA_ERROR_UNKNOWN", "times": 1, "pids": [123], "leave": "failed"},
//	 "checkpoint": {...}, "restore": {...}, "unlock": {...}, "get-state": {...}, "get-restore-tid": {...},
//	 "help": {"no_device_map": true, "no_action": true},
//	 "loader": {"needs_libcuda": true, "cuda_version": 12030}}
//
// delay_ms sleeps before acting; a lock given --timeout MS shorter than the
// delay sleeps MS and fails with CUDA_ERROR_TIMEOUT. error fails with that
// CUresult (named as in cuda.h; the names the fake knows are in cuerrors.go)
// after the delay, leaving the state unchanged, or forced to leave. times
// N > 0 limits the fault to the first N matching calls (counted in
// faults.count.<action> beside faults.json, under flock); pids limits it to
// those target pids. help takes delay_ms and error too. The tool's --help
// is the installed driver's: by default driver 580's (with --device-map);
// help.no_device_map gives driver 570's and help.no_action driver 550's
// (only --toggle), and the flags a help lacks are bad usage. loader models
// the tool's start (loader.go). --toggle applies the faults of the actions
// it runs. A missing faults.json injects nothing.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

func main() {
	dir := filepath.Dir(os.Args[0])
	faults, err := checkpointtest.ReadFaults(dir)
	if err == nil {
		err = checkErrorNames(faults)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda-checkpoint:", err)
		os.Exit(2)
	}
	if msg, status := start(os.Args[0], faults["loader"]); status != 0 {
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(status)
	}
	help := faults["help"]
	inv, err := parseArgs(os.Args[1:], help)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cuda-checkpoint: %v\n%s", err, usageLine)
		os.Exit(2)
	}
	if inv.mode == "help" {
		if err := helpFault(dir, help); err != nil {
			fmt.Fprintln(os.Stderr, "cuda-checkpoint:", err)
			os.Exit(1)
		}
		fmt.Print(helpText(help))
		return
	}
	f := &fake{dir: dir, faults: faults, pid: inv.pid, toggling: inv.mode == "toggle"}
	if err := f.run(inv); err != nil {
		var ce *cudaError
		if !errors.As(err, &ce) {
			fmt.Fprintln(os.Stderr, "cuda-checkpoint:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, ce.line)
		os.Exit(ce.status)
	}
}

// helpFault applies the help fault's delay and error.
func helpFault(dir string, help checkpointtest.Fault) error {
	if help.DelayMS == 0 && help.Error == "" {
		return nil
	}
	if take, err := help.Take(dir, "help", 0); err != nil || !take {
		return err
	}
	time.Sleep(time.Duration(help.DelayMS) * time.Millisecond)
	if help.Error != "" {
		return fmt.Errorf("help: %s: injected fault", help.Error)
	}
	return nil
}
