package daemon

import (
	"slices"

	"github.com/gpusched/gpusched/pkg/api"
)

// procStateFilter reads a states filter of ps: nil when none was given, so
// that every state passes.
func procStateFilter(states []api.State) (map[api.State]bool, error) {
	if states == nil {
		return nil, nil
	}
	if len(states) == 0 {
		return nil, invalidf("ps: states is empty; leave it out for every state")
	}
	out := map[api.State]bool{}
	for _, s := range states {
		if !slices.Contains(api.States, s) {
			return nil, invalidf("ps: unknown state %q (one of %v)", s, api.States)
		}
		out[s] = true
	}
	return out, nil
}

// jobStateFilter reads the state and states filters of jobs into one set,
// with "finished" standing for every final state: nil when neither was
// given.
func jobStateFilter(state api.JobState, states []api.JobState) (map[api.JobState]bool, error) {
	switch {
	case state != "" && states != nil:
		return nil, invalidf("jobs: give state or states, not both")
	case state != "":
		states = []api.JobState{state}
	case states == nil:
		return nil, nil
	case len(states) == 0:
		return nil, invalidf("jobs: states is empty; leave it out for the unfinished jobs")
	}
	out := map[api.JobState]bool{}
	for _, s := range states {
		switch {
		case s == api.JobsFinished:
			for _, f := range api.JobStates {
				if f.Terminal() {
					out[f] = true
				}
			}
		case slices.Contains(api.JobStates, s):
			out[s] = true
		default:
			return nil, invalidf("jobs: unknown state %q (one of %v, or %s)", s, api.JobStates, api.JobsFinished)
		}
	}
	return out, nil
}
