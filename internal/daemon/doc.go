// Package daemon is gpuschedd's composition root and socket server. It
// builds the subsystems (GPU backend, process table, logs), serves the
// JSON-lines protocol of pkg/api on a Unix socket with every connection
// identified by SO_PEERCRED, checks each caller's rights, orchestrates the
// lifecycle of managed processes (spawn through the sandbox, exit watching by
// pidfd, kill, re-adoption after a restart) and maps errors to wire codes
// at one boundary (errors.go).
package daemon
