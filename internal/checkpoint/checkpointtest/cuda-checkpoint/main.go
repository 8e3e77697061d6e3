// Command cuda-checkpoint is a test stand-in for NVIDIA's cuda-checkpoint,
// acting on simulated GPUs (internal/simgpu) with the real tool's grammar:
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
// It finds the sim directory in the target's environment (GPUSCHED_SIM_DIR
// in /proc/P/environ); without it the target is not a CUDA process. Success
// exits 0 silently (but for the queries); failure exits 1 with one stderr
// line "cuda-checkpoint: <action> pid <P>: <CUDA_ERROR_NAME>: <text>";
// bad usage exits 2.
//
// Faults are injected through faults.json in the directory of argv[0] (tests
// symlink the built fake into a per-test directory), shaped as
//
//	{"lock": {"delay_ms": 100, "error": "CUDA_ERROR_UNKNOWN", "times": 1, "pids": [123], "leave": "failed"},
//	 "checkpoint": {...}, "restore": {...}, "unlock": {...}, "get-state": {...}, "get-restore-tid": {...},
//	 "help": {"no_device_map": true, "no_action": true}}
//
// delay_ms sleeps before acting; a lock given --timeout MS shorter than the
// delay sleeps MS and fails with CUDA_ERROR_TIMEOUT. error fails with that
// name after the delay, leaving the state unchanged, or forced to leave.
// times N > 0 limits the fault to the first N matching calls (counted in
// faults.count.<action> beside faults.json, under flock); pids limits it to
// those target pids. help takes delay_ms and error too; help.no_device_map
// drops --device-map from --help and rejects it as bad usage, and
// help.no_action does the same for --action, as a tool older than driver
// 570. --toggle applies the faults of the actions it runs. A missing
// faults.json injects nothing.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
)

func main() {
	dir := filepath.Dir(os.Args[0])
	faults, err := checkpointtest.ReadFaults(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "cuda-checkpoint:", err)
		os.Exit(2)
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
	f := &fake{dir: dir, faults: faults, pid: inv.pid}
	if err := f.run(inv); err != nil {
		fmt.Fprintln(os.Stderr, "cuda-checkpoint:", err)
		os.Exit(1)
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
