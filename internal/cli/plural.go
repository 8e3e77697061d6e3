package cli

import "fmt"

// plural is a count with its noun: "1 copy", "3 copies", "0 copies".
func plural[N ~int | ~uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
