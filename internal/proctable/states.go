package proctable

import "github.com/gpusched/gpusched/pkg/api"

// transitions lists the legal state changes.
var transitions = map[api.State][]api.State{
	api.StateStarting: {api.StateRunning, api.StateExited},
	api.StateRunning:  {api.StateExited},
	api.StateExited:   {},
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
