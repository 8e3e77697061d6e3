package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/gpusched/gpusched/internal/checkpoint/checkpointtest"
	"github.com/gpusched/gpusched/internal/simgpu"
)

// fake acts on one target process.
type fake struct {
	dir      string // where faults.json lives
	faults   checkpointtest.Faults
	pid      int
	toggling bool // the invocation is --toggle
	reg      *simgpu.Registry
}

// cudaError is a failure as the real tool reports it: one line and an exit
// status.
type cudaError struct {
	line   string
	status int
}

func (e *cudaError) Error() string { return e.line }

// fail reports that action failed with the CUresult named name. The real
// tool prints one line, ending in the result's cuGetErrorString text in
// quotes, and returns the CUresult as its exit status (the stub's main
// returns what the driver's tool returns), which the kernel cuts to 8 bits.
// The lines: `Could not restore on process ID 1100100: "invalid
// argument"` (NVIDIA/cuda-checkpoint#35; the lock's in #58), `Error toggling
// CUDA in process ID 98145: "operation not permitted"` (#25, #34), `Error
// getting process state for process ID N: "initialization error"`
// (google/gvisor#12600). No public sample shows --get-restore-tid failing:
// its line is shaped like --get-state's.
func (f *fake) fail(action, name string) error {
	r := cudaResults[name]
	var line string
	switch {
	case f.toggling:
		line = fmt.Sprintf("Error toggling CUDA in process ID %d", f.pid)
	case action == "get-state":
		line = fmt.Sprintf("Error getting process state for process ID %d", f.pid)
	case action == "get-restore-tid":
		line = fmt.Sprintf("Error getting restore thread ID for process ID %d", f.pid)
	default:
		line = fmt.Sprintf("Could not %s on process ID %d", action, f.pid)
	}
	return &cudaError{line: fmt.Sprintf(`%s: "%s"`, line, r.text), status: r.code & 0xff}
}

// run carries out one parsed invocation.
func (f *fake) run(inv invocation) error {
	op := inv.mode
	if op == "action" {
		op = inv.action
	}
	if err := f.open(op); err != nil {
		return err
	}
	switch inv.mode {
	case "get-state":
		if err := f.inject("get-state", 0); err != nil {
			return err
		}
		state, err := f.reg.CheckpointStateContext(context.Background(), f.pid)
		if err != nil {
			return f.simError("get-state", err)
		}
		fmt.Println(state)
		return nil
	case "get-restore-tid":
		if err := f.inject("get-restore-tid", 0); err != nil {
			return err
		}
		// The tid of the thread CUDA restores the process on, not the
		// process's pid (see simgpu's restorethread.go).
		tid, err := f.reg.RestoreThreadID(f.pid)
		if err != nil {
			return f.simError("get-restore-tid", err)
		}
		fmt.Println(tid)
		return nil
	case "toggle":
		return f.toggle()
	}
	return f.action(inv.action, inv.timeoutMS, inv.deviceMap)
}

// open finds the target's sim directory in its environment.
func (f *fake) open(op string) error {
	env, err := os.ReadFile("/proc/" + strconv.Itoa(f.pid) + "/environ")
	if err != nil {
		return f.fail(op, "CUDA_ERROR_INVALID_VALUE") // no such process
	}
	prefix := []byte(simgpu.EnvDir + "=")
	for _, kv := range bytes.Split(env, []byte{0}) {
		if dir, ok := bytes.CutPrefix(kv, prefix); ok && len(dir) > 0 {
			if f.reg, err = simgpu.Open(string(dir)); err != nil {
				return f.fail(op, "CUDA_ERROR_INVALID_VALUE") // no CUDA context
			}
			return nil
		}
	}
	return f.fail(op, "CUDA_ERROR_INVALID_VALUE") // no CUDA context
}

// toggle checkpoints a running process or restores a checkpointed one.
func (f *fake) toggle() error {
	state, err := f.reg.CheckpointState(f.pid)
	if err != nil {
		return f.simError("toggle", err)
	}
	var steps []string
	switch state {
	case simgpu.StateRunning:
		steps = []string{"lock", "checkpoint"}
	case simgpu.StateCheckpointed:
		steps = []string{"restore", "unlock"}
	default:
		return f.fail("toggle", "CUDA_ERROR_ILLEGAL_STATE")
	}
	for _, s := range steps {
		if err := f.action(s, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// action runs one step of the state machine, after its injected fault.
func (f *fake) action(action string, timeoutMS int, remap map[string]string) error {
	if err := f.inject(action, timeoutMS); err != nil {
		return err
	}
	var err error
	switch action {
	case "lock": // waits at most --timeout where an NCCL peer is locked
		err = f.reg.LockProcessContext(context.Background(), f.pid, time.Duration(timeoutMS)*time.Millisecond)
	case "checkpoint":
		_, err = f.reg.CheckpointProcessContext(context.Background(), f.pid)
	case "restore":
		// Like the real tool, it waits as long as the restore thread is
		// stopped.
		_, err = f.reg.RestoreProcess(context.Background(), f.pid, remap)
	case "unlock":
		err = f.reg.UnlockProcessContext(context.Background(), f.pid)
	}
	if err != nil {
		return f.simError(action, err)
	}
	return nil
}

// inject applies the fault configured for action, if it matches this call.
// timeoutMS is a lock's --timeout (0: none).
func (f *fake) inject(action string, timeoutMS int) error {
	flt, ok := f.faults[action]
	if !ok {
		return nil
	}
	take, err := flt.Take(f.dir, action, f.pid)
	if err != nil {
		return f.fail(action, "CUDA_ERROR_UNKNOWN") // the fault's counter failed
	}
	if !take {
		return nil
	}
	if action == "lock" && timeoutMS > 0 && flt.DelayMS > timeoutMS {
		time.Sleep(time.Duration(timeoutMS) * time.Millisecond)
		return f.fail(action, "CUDA_ERROR_TIMEOUT")
	}
	time.Sleep(time.Duration(flt.DelayMS) * time.Millisecond)
	if flt.Gate != "" {
		if err := waitGate(flt.Gate); err != nil {
			return f.fail(action, "CUDA_ERROR_UNKNOWN") // the gate timed out
		}
	}
	if flt.Error == "" {
		return nil
	}
	if flt.Leave != "" {
		if err := f.reg.SetCheckpointState(f.pid, flt.Leave); err != nil {
			return f.simError(action, err)
		}
	}
	if action == "restore" && flt.Error == "CUDA_ERROR_OUT_OF_MEMORY" {
		// An out-of-memory restore breaks later ones (NVIDIA/cuda-checkpoint#44).
		if err := f.reg.BreakRestore(f.pid); err != nil {
			return f.simError(action, err)
		}
	}
	return f.fail(action, flt.Error)
}

// gateLimit bounds how long a gated call waits for its gate.
const gateLimit = time.Minute

// waitGate announces that a call reached gate, then waits until the test
// opens it.
func waitGate(gate string) error {
	if err := os.WriteFile(gate+".waiting", nil, 0o644); err != nil {
		return err
	}
	for deadline := time.Now().Add(gateLimit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(gate); err == nil {
			return nil
		}
	}
	return fmt.Errorf("gate %s not opened in %v", gate, gateLimit)
}

// simError reports a simgpu failure as the driver's CUresult. A device map
// naming a GPU the driver cannot restore onto is "invalid argument", the
// process left checkpointed (NVIDIA/cuda-checkpoint#35).
func (f *fake) simError(action string, err error) error {
	name := "CUDA_ERROR_UNKNOWN"
	switch {
	case errors.Is(err, simgpu.ErrIllegalState):
		name = "CUDA_ERROR_ILLEGAL_STATE"
	case errors.Is(err, simgpu.ErrOutOfMemory):
		name = "CUDA_ERROR_OUT_OF_MEMORY"
	case errors.Is(err, simgpu.ErrNoCUDA), errors.Is(err, simgpu.ErrNoSuchProcess), errors.Is(err, simgpu.ErrNoSuchDevice):
		name = "CUDA_ERROR_INVALID_VALUE"
	case errors.Is(err, simgpu.ErrTimeout):
		name = "CUDA_ERROR_TIMEOUT"
	case errors.Is(err, simgpu.ErrBadDeviceMap):
		name = "CUDA_ERROR_INVALID_VALUE"
	case errors.Is(err, simgpu.ErrRestoreBroken):
		name = "CUDA_ERROR_OPERATING_SYSTEM"
	}
	return f.fail(action, name)
}
