package cgroup

import "errors"

var (
	// ErrUnavailable means cpu.weight cannot be managed here; the error
	// wrapping it says why.
	ErrUnavailable = errors.New("cgroup v2 cpu controller unavailable")
	// ErrInvalidID means an id cannot name a cgroup directory.
	ErrInvalidID = errors.New("invalid cgroup id")
	// ErrNotFound means a tree has no cgroup.
	ErrNotFound = errors.New("cgroup not found")
	// ErrBusy means a cgroup still holds processes.
	ErrBusy = errors.New("cgroup still holds processes")
)
