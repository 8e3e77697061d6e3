// Package proctable owns the records of managed processes: their identity
// (init and command pid plus start time), owner, command, state and exit,
// the state machine that says which transitions are legal, and their
// persistence (one atomically written file per process). Readers get an
// immutable snapshot without taking a lock, so listing never waits for a
// slow lifecycle operation.
package proctable
