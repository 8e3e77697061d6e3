package api

import (
	"fmt"
	"strconv"
	"strings"
)

// MinBareMiB is the smallest size given without a unit: below it, a bare
// number ("10") is far more likely GiB with the unit forgotten than MiB.
const MinBareMiB = 64

// ParseMiB parses a memory size into MiB: a whole number with a binary unit
// (M/MB/MiB, G/GB/GiB, T/TB/TiB, any case), such as "18G" or "512MiB"; a
// bare number is MiB, and must be 0 or at least MinBareMiB.
func ParseMiB(s string) (uint64, error) {
	lower := strings.ToLower(strings.TrimSpace(s))
	digits := strings.TrimRight(lower, "abcdefghijklmnopqrstuvwxyz")
	unit := lower[len(digits):]
	var shift uint
	switch unit {
	case "", "m", "mb", "mib":
	case "g", "gb", "gib":
		shift = 10
	case "t", "tb", "tib":
		shift = 20
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want M, G or T)", s, unit)
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is not a whole number with an optional unit (M, G or T)", s)
	}
	if unit == "" && n > 0 && n < MinBareMiB {
		return 0, noUnitError{s, n}
	}
	if n > (1<<44)>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n << shift, nil
}

// noUnitError is a bare number below MinBareMiB.
type noUnitError struct {
	s string
	n uint64
}

func (e noUnitError) Error() string {
	return fmt.Sprintf("size %q has no unit: did you mean %dG? (a number alone is MiB: write %dM for %d MiB)", e.s, e.n, e.n, e.n)
}
