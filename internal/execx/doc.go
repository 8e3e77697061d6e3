// Package execx owns running external binaries: it is the one helper through
// which every package starts a tool (cuda-checkpoint, nvidia-smi, criu
// scripts). Run starts the binary in its own process group with a minimal
// environment on the CPUs the daemon gives users (cpuaffinity.StartOn: a
// tool works for users' operations, never on the daemon's own CPUs),
// bounds what it captures, kills the whole group when the
// context ends, and reports failures as a typed *ExitError carrying the
// command and the tail of its stderr.
package execx
