package placement

import "slices"

// skip says why the health filters pass over a GPU for a job.
type skip uint8

// Filter outcomes: the health filters (banned counts as one), and outside
// for a GPU not in the job's Only list.
const (
	healthy skip = iota
	skipBanned
	skipMinFree
	skipUtil
	skipPower
	skipTemp
	outside
)

// limits are one job's health thresholds: the Options' and the job's own,
// the stricter winning.
type limits struct {
	minFree  uint64
	maxUtil  int
	maxPower float64
	maxTemp  int
}

func limitsFor(o Options, j *Job) limits {
	return limits{
		minFree:  max(o.MinFreeMiB, j.MinFreeMiB),
		maxUtil:  stricter(o.MaxUtilPercent, j.MaxUtilPercent),
		maxPower: stricter(o.MaxPowerWatts, j.MaxPowerWatts),
		maxTemp:  stricter(o.MaxTempC, j.MaxTempC),
	}
}

// stricter is the lower of two ceilings where 0 means none.
func stricter[T int | float64](a, b T) T {
	if a == 0 || (b != 0 && b < a) {
		return b
	}
	return a
}

// check is the first health filter that skips g, or healthy. Transient
// filters pass when the GPU does not report the value.
func (l limits) check(g *gpuState) skip {
	switch {
	case g.banned:
		return skipBanned
	case g.free < l.minFree:
		return skipMinFree
	case l.maxUtil > 0 && g.util != nil && *g.util > l.maxUtil:
		return skipUtil
	case l.maxPower > 0 && g.power != nil && *g.power > l.maxPower:
		return skipPower
	case l.maxTemp > 0 && g.temp != nil && *g.temp > l.maxTemp:
		return skipTemp
	}
	return healthy
}

// within reports whether g is one the job may use at all (its Only list).
func within(j *Job, g *gpuState) bool {
	return len(j.Only) == 0 || slices.Contains(j.Only, g.uuid)
}
