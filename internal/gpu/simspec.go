package gpu

import (
	"fmt"
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

// ParseSimSpec parses a --sim value: "N" (N GPUs of DefaultSimMiB) or
// "NxSIZE" with SIZE a whole number and a binary unit, such as 24G, 80GiB,
// 16384M or 1T (M/MB/MiB, G/GB/GiB, T/TB/TiB, any case).
func ParseSimSpec(s string) (count int, sizeMiB uint64, err error) {
	spec := strings.ToLower(strings.TrimSpace(s))
	countStr, sizeStr, hasSize := strings.Cut(spec, "x")
	count, err = strconv.Atoi(countStr)
	if err != nil {
		return 0, 0, fmt.Errorf("--sim %q: GPU count %q is not a number (want N or NxSIZE, e.g. 2 or 4x80G)", s, countStr)
	}
	if count < 1 || count > MaxSimGPUs {
		return 0, 0, fmt.Errorf("--sim %q: GPU count must be 1 to %d", s, MaxSimGPUs)
	}
	if !hasSize {
		return count, DefaultSimMiB, nil
	}
	sizeMiB, err = parseSizeMiB(sizeStr)
	if err != nil {
		return 0, 0, fmt.Errorf("--sim %q: %w", s, err)
	}
	return count, sizeMiB, nil
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
