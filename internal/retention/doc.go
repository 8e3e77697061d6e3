// Package retention decides which finished records (exited processes,
// finished jobs) to forget: past a count and bytes kept per user, newest
// first, past an equal share of the bytes all users may keep together, and
// past an age. It only selects; the daemon removes. Pure: no I/O, no clock.
package retention
