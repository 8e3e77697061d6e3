package api

import "fmt"

// Plural is a count with its noun, for messages people read: "1 copy",
// "3 copies", "0 copies".
func Plural[N ~int | ~uint64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
