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
	dir    string // where faults.json lives
	faults checkpointtest.Faults
	pid    int
	reg    *simgpu.Registry
}

// cudaError is a failure reported with a CUDA_ERROR_ name.
type cudaError struct {
	action, name, text string
	pid                int
}

func (e *cudaError) Error() string {
	return fmt.Sprintf("%s pid %d: %s: %s", e.action, e.pid, e.name, e.text)
}

func (f *fake) fail(action, name, format string, args ...any) error {
	return &cudaError{action: action, pid: f.pid, name: name, text: fmt.Sprintf(format, args...)}
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
		state, err := f.reg.CheckpointState(f.pid)
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
		return f.fail(op, "CUDA_ERROR_INVALID_VALUE", "no such process: %v", err)
	}
	prefix := []byte(simgpu.EnvDir + "=")
	for _, kv := range bytes.Split(env, []byte{0}) {
		if dir, ok := bytes.CutPrefix(kv, prefix); ok && len(dir) > 0 {
			if f.reg, err = simgpu.Open(string(dir)); err != nil {
				return f.fail(op, "CUDA_ERROR_INVALID_VALUE", "no CUDA context: %v", err)
			}
			return nil
		}
	}
	return f.fail(op, "CUDA_ERROR_INVALID_VALUE", "no CUDA context (no %s in its environment)", simgpu.EnvDir)
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
		return f.fail("toggle", "CUDA_ERROR_ILLEGAL_STATE", "process is %s", state)
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
	case "lock":
		err = f.reg.LockProcess(f.pid)
	case "checkpoint":
		_, err = f.reg.CheckpointProcess(f.pid)
	case "restore":
		// Like the real tool, it waits as long as the restore thread is
		// stopped.
		_, err = f.reg.RestoreProcess(context.Background(), f.pid, remap)
	case "unlock":
		err = f.reg.UnlockProcess(f.pid)
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
		return f.fail(action, "CUDA_ERROR_UNKNOWN", "fault injection: %v", err)
	}
	if !take {
		return nil
	}
	if action == "lock" && timeoutMS > 0 && flt.DelayMS > timeoutMS {
		time.Sleep(time.Duration(timeoutMS) * time.Millisecond)
		return f.fail(action, "CUDA_ERROR_TIMEOUT", "lock timed out after %d ms", timeoutMS)
	}
	time.Sleep(time.Duration(flt.DelayMS) * time.Millisecond)
	if flt.Gate != "" {
		if err := waitGate(flt.Gate); err != nil {
			return f.fail(action, "CUDA_ERROR_UNKNOWN", "fault injection: %v", err)
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
	return f.fail(action, flt.Error, "injected fault")
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

// simError reports a simgpu failure under its CUDA error name.
func (f *fake) simError(action string, err error) error {
	name := "CUDA_ERROR_UNKNOWN"
	switch {
	case errors.Is(err, simgpu.ErrIllegalState):
		name = "CUDA_ERROR_ILLEGAL_STATE"
	case errors.Is(err, simgpu.ErrOutOfMemory):
		name = "CUDA_ERROR_OUT_OF_MEMORY"
	case errors.Is(err, simgpu.ErrNoCUDA), errors.Is(err, simgpu.ErrNoSuchProcess):
		name = "CUDA_ERROR_INVALID_VALUE"
	case errors.Is(err, simgpu.ErrNoSuchDevice):
		name = "CUDA_ERROR_INVALID_DEVICE"
	case errors.Is(err, simgpu.ErrBadDeviceMap):
		name = "CUDA_ERROR_INVALID_VALUE"
	case errors.Is(err, simgpu.ErrRestoreBroken):
		name = "CUDA_ERROR_OPERATING_SYSTEM"
	}
	return f.fail(action, name, "%v", err)
}
