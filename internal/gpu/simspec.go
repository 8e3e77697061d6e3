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
	Count       int
	SizeMiB     uint64
	MIG         []int  // indices of the GPUs in MIG mode, ascending
	ReservedMiB uint64 // each GPU's driver reserve (simgpu.Device.ReservedMiB)
	ContextMiB  uint64 // a CUDA context's cost on each GPU (simgpu.Device.ContextMiB)
}

// ParseSimSpec parses a --sim value: "N" (N GPUs of DefaultSimMiB) or
// "NxSIZE" with SIZE a whole number and a binary unit, such as 24G, 80GiB,
// 16384M or 1T (M/MB/MiB, G/GB/GiB, T/TB/TiB, any case), optionally
// followed by options, each after a ':': "mig=I,J,..." puts GPUs I, J, ...
// in MIG mode; "reserved=SIZE" has the driver reserve SIZE of each GPU
// (as NVML counts it, left out of CUDA's total) and "context=SIZE" makes a
// CUDA context cost SIZE on each (both 0 by default; an H200 with driver
// 580.159.04 has reserved=616M:context=518M).
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
		if err := out.parseOptions(opts); err != nil {
			return SimSpec{}, fmt.Errorf("--sim %q: %w", s, err)
		}
	}
	return out, nil
}

// parseOptions parses the ':'-separated options after the size.
func (spec *SimSpec) parseOptions(opts string) error {
	seen := map[string]bool{}
	for _, o := range strings.Split(opts, ":") {
		key, val, _ := strings.Cut(o, "=")
		if seen[key] {
			return fmt.Errorf("option %s is given twice", key)
		}
		seen[key] = true
		var err error
		switch key {
		case "mig":
			spec.MIG, err = parseMIG(val, spec.Count)
		case "reserved":
			spec.ReservedMiB, err = parsePart(key, val, spec.SizeMiB)
		case "context":
			spec.ContextMiB, err = parsePart(key, val, spec.SizeMiB)
		default:
			return fmt.Errorf("unknown option %q (want mig=I,J,..., reserved=SIZE or context=SIZE)", o)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parsePart parses the SIZE of option key, less than the GPU's size
// (NewSim checks that the reserve and a context together leave room).
func parsePart(key, s string, sizeMiB uint64) (uint64, error) {
	n, err := api.ParseMiB(s)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: %w", key, err)
	case n >= sizeMiB:
		return 0, fmt.Errorf("%s: %d MiB leaves nothing of the GPU's %d MiB", key, n, sizeMiB)
	}
	return n, nil
}

// parseMIG parses the GPU list of "mig=I,J,..." into ascending GPU indices
// below count.
func parseMIG(list string, count int) ([]int, error) {
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
