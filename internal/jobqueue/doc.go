// Package jobqueue owns the queued jobs: their persisted records (one file
// per job in the state store), the state each is in, their attempts, and
// what is learned from them (peak VRAM per command, out-of-memory endings,
// declared-versus-actual verdicts). It decides nothing about placement and
// starts nothing: the daemon does, through placement and the process table.
package jobqueue
