// Package placement will decide where queued jobs run: a pure function from
// an immutable snapshot of the GPUs and their occupants plus a request to a
// decision with reasons. It imports only the standard library and does no
// I/O and reads no clock. Until the placement queue lands (issue 5) it holds
// no code.
package placement
