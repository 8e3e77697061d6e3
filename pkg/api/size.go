package api

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseMiB parses a memory size into MiB: a whole number with a binary unit
// (M/MB/MiB, G/GB/GiB, T/TB/TiB, any case), such as "18G" or "512MiB"; a
// bare number is MiB.
func ParseMiB(s string) (uint64, error) {
	lower := strings.ToLower(strings.TrimSpace(s))
	digits := strings.TrimRight(lower, "abcdefghijklmnopqrstuvwxyz")
	var shift uint
	switch lower[len(digits):] {
	case "", "m", "mb", "mib":
	case "g", "gb", "gib":
		shift = 10
	case "t", "tb", "tib":
		shift = 20
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q (want M, G or T)", s, lower[len(digits):])
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is not a whole number with an optional unit (M, G or T)", s)
	}
	if n > (1<<44)>>shift {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n << shift, nil
}
