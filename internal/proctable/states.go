package proctable

import "github.com/gpusched/gpusched/pkg/api"

// transitions lists the legal state changes.
// Every live state may end in exited. A freeze or thaw that fails ends in
// the state the driver's own state query shows (running, frozen, locked or
// failed); locked and failed are resumed by a retried freeze or thaw.
var transitions = map[api.State][]api.State{
	api.StateStarting: {api.StateRunning, api.StateExited},
	api.StateRunning:  {api.StateFreezing, api.StateExited, api.StateHibernated},
	api.StateFreezing: {api.StateFrozen, api.StateRunning, api.StateLocked, api.StateFailed, api.StateExited},
	api.StateFrozen:   {api.StateThawing, api.StateHibernating, api.StateExited, api.StateHibernated},
	api.StateThawing:  {api.StateRunning, api.StateFrozen, api.StateLocked, api.StateFailed, api.StateExited},
	api.StateLocked:   {api.StateFreezing, api.StateThawing, api.StateExited, api.StateHibernated},
	api.StateFailed:   {api.StateFreezing, api.StateThawing, api.StateExited, api.StateHibernated},
	api.StateExited:   {},
	// The disk tier: a frozen tree is dumped (and gone from memory), then
	// restored frozen and thawed. A failed dump leaves it frozen, a failed
	// restore hibernated, and so does a lazy thaw whose page source failed,
	// from whatever state the thaw left it in (its tree is killed).
	api.StateHibernating: {api.StateHibernated, api.StateFrozen, api.StateExited},
	api.StateHibernated:  {api.StateRestoring, api.StateExited},
	api.StateRestoring:   {api.StateFrozen, api.StateHibernated, api.StateExited},
}

// diesWithMachine reports whether a process in state s ends with the
// machine. Changes between such states are written without fsync: after a
// machine crash the next boot marks the process exited whatever state its
// record had, so only creation, exit and removal need to reach the disk.
// A run writes its record three times (created, its supervisor's pid, its
// command's pid) and syncs only the first; a daemon that crashes keeps the
// others in the page cache, and one that finds a record still starting
// looks for the command under the supervisor (adopt).
func diesWithMachine(s api.State) bool {
	switch s {
	case api.StateStarting, api.StateRunning, api.StateFreezing, api.StateFrozen, api.StateThawing, api.StateLocked, api.StateFailed:
		return true
	}
	return false
}

// CanTransition reports whether from -> to is legal (staying put always is).
func CanTransition(from, to api.State) bool {
	if from == to {
		return true
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
