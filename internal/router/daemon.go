package router

import (
	"context"

	"github.com/gpusched/gpusched/pkg/api"
)

// Daemon is what the router needs of gpuschedd. NewDaemon gives the real
// one over pkg/api; every call acts as the user the router runs as.
type Daemon interface {
	// Process returns the managed process name (api.IsNotFound when none).
	Process(ctx context.Context, name string) (*api.Process, error)
	// PS lists the caller's processes.
	PS(ctx context.Context) ([]api.Process, error)
	// Run starts a managed process (replacing an exited one of that name).
	Run(ctx context.Context, p api.RunParams) (*api.Process, error)
	// Set changes a process's disk-tier policy.
	Set(ctx context.Context, p api.SetParams) error
	// Kill ends a process tree (SIGTERM, then SIGKILL after the daemon's grace).
	Kill(ctx context.Context, name string) error
	// Freeze parks a running process's GPU memory in host RAM.
	Freeze(ctx context.Context, name string) error
	// GPUs samples the GPUs' memory.
	GPUs(ctx context.Context) ([]api.GPU, error)
	// Logs returns the last lines of a process's log.
	Logs(ctx context.Context, name string, lines int) ([]string, error)
	// Hold activates name with hold (the daemon's activate): it makes name
	// resident, thawing it from RAM or disk and, when it does not fit,
	// freezing the processes of evict in that order (nil: the owner's
	// least recently active unheld ones on its GPUs), and keeps it from
	// being frozen to make room until the Hold is closed.
	Hold(ctx context.Context, name string, evict []string) (Hold, error)
}

// Hold is one held activation: the process stays resident until Close.
type Hold interface {
	// Was is the state the process was in before the activation.
	Was() api.State
	Close() error
}
