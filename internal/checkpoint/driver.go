package checkpoint

import (
	"context"
	"time"
)

// State is a CUDA process's checkpoint state as the driver reports it
// (CUprocessState). The legal transitions are
//
//	running -lock-> locked -checkpoint-> checkpointed -restore-> locked -unlock-> running
//
// and the driver refuses any other.
type State string

// The driver's process states.
const (
	StateRunning      State = "running"
	StateLocked       State = "locked"
	StateCheckpointed State = "checkpointed"
	StateFailed       State = "failed"
)

// Caps says what a driver (and the installed NVIDIA driver behind it) can do.
type Caps struct {
	Kind       string `json:"kind"`              // "api", "cli" or "sim"
	Version    string `json:"version,omitempty"` // driver version, when known
	DeviceMap  bool   `json:"device_map"`        // restore onto other GPUs (migrate)
	RestoreTID bool   `json:"restore_tid"`       // restore thread id query
	Warning    string `json:"warning,omitempty"` // a known problem of this driver version
}

// GPUPair maps a GPU a process was checkpointed on to the GPU it is restored
// onto, both by UUID ("GPU-...").
type GPUPair struct {
	Old string `json:"old"`
	New string `json:"new"`
}

// Driver is the method set every implementation (CLI, API, Sim) provides.
// Each call acts on one pid, honours ctx's deadline, and fails with an
// *OpError that matches the sentinels in errors.go. The daemon declares its
// own copy of this interface; this one documents the contract and lets the
// implementations be checked against it.
type Driver interface {
	Caps() Caps
	State(ctx context.Context, pid int) (State, error)
	Lock(ctx context.Context, pid int, timeout time.Duration) error
	Checkpoint(ctx context.Context, pid int) error
	Restore(ctx context.Context, pid int, pairs []GPUPair) error
	Unlock(ctx context.Context, pid int) error
	RestoreThreadID(ctx context.Context, pid int) (int, error)
	Close() error
}
