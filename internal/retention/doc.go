// Package retention decides which finished records (exited processes,
// finished jobs) to forget: past a count kept per user, newest first, and
// past an age. It only selects; the daemon removes. Pure: no I/O, no clock.
package retention
