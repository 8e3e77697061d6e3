//go:build race

package router_test

// raceEnabled: the tests run under the race detector, and so does the
// router binary they start.
const raceEnabled = true
