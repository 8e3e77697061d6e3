package gpu

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpusched/gpusched/pkg/api"
)

// Limits and default of simulated GPUs.
const (
	DefaultSimMiB = 24 << 10 // size of each GPU when --sim gives only a count
	MinSimMiB     = 1 << 10
	MaxSimMiB     = 1 << 20
	MaxSimGPUs    = 64
)

// SimSpec is a parsed --sim value.
type SimSpec struct {
	Count   int
	SizeMiB uint64
	MIG     []int // indices of the GPUs in MIG mode, ascending
}

// ParseSimSpec parses a --sim value: "N" (N GPUs of DefaultSimMiB) or
// "NxSIZE" with SIZE a whole number and a binary unit, such as 24G, 80GiB,
// 16384M or 1T (M/MB/MiB, G/GB/GiB, T/TB/TiB, any case), optionally
// followed by ":mig=I,J,..." to put GPUs I, J, ... in MIG mode.
func ParseSimSpec(s string) (SimSpec, error) {
	spec, opts, hasOpts := strings.Cut(strings.ToLower(strings.TrimSpace(s)), ":")
	countStr, sizeStr, hasSize := strings.Cut(spec, "x")
	count, err := strconv.Atoi(countStr)
	if err != nil {
		return SimSpec{}, fmt.Errorf("--sim %q: GPU count %q is not a number (want N or NxSIZE, e.g. 2 or 4x80G)", s, countStr)
	}
	if count < 1 || count > MaxSimGPUs {
		return SimSpec{}, fmt.Errorf("--sim %q: GPU count must be 1 to %d", s, MaxSimGPUs)
	}
	out := SimSpec{Count: count, SizeMiB: DefaultSimMiB}
	if hasSize {
		if out.SizeMiB, err = parseSizeMiB(sizeStr); err != nil {
			return SimSpec{}, fmt.Errorf("--sim %q: %w", s, err)
		}
	}
	if hasOpts {
		if out.MIG, err = parseMIG(opts, count); err != nil {
			return SimSpec{}, fmt.Errorf("--sim %q: %w", s, err)
		}
	}
	return out, nil
}

// parseMIG parses "mig=I,J,..." into ascending GPU indices below count.
func parseMIG(s string, count int) ([]int, error) {
	list, ok := strings.CutPrefix(s, "mig=")
	if !ok {
		return nil, fmt.Errorf("unknown option %q (want mig=I,J,...)", s)
	}
	var out []int
	for _, f := range strings.Split(list, ",") {
		i, err := strconv.Atoi(f)
		switch {
		case err != nil:
			return nil, fmt.Errorf("mig: GPU index %q is not a number", f)
		case i < 0 || i >= count:
			return nil, fmt.Errorf("mig: GPU %d does not exist (0 to %d)", i, count-1)
		case slices.Contains(out, i):
			return nil, fmt.Errorf("mig: GPU %d is named twice", i)
		}
		out = append(out, i)
	}
	slices.Sort(out)
	return out, nil
}

// parseSizeMiB parses a size such as "24g" or "512mib" into MiB, within
// MinSimMiB..MaxSimMiB. A bare number is refused: a simulated GPU's size
// needs its unit.
func parseSizeMiB(s string) (uint64, error) {
	if strings.TrimRight(s, "0123456789") == "" {
		return 0, fmt.Errorf("size %q needs a unit: M, G or T (binary)", s)
	}
	n, err := api.ParseMiB(s)
	switch {
	case err != nil:
		return 0, err
	case n > MaxSimMiB:
		return 0, fmt.Errorf("size %q is over 1 TiB", s)
	case n < MinSimMiB:
		return 0, fmt.Errorf("size %q is under 1 GiB", s)
	}
	return n, nil
}
