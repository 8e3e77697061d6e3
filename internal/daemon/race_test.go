//go:build race

package daemon

// raceEnabled: the tests run under the race detector, whose sync.Pool
// drops a share of what it is given, on purpose.
const raceEnabled = true
