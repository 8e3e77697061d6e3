// Package netguard keeps a listener's accept loop from being turned
// against the daemon: Retry backs off on accept errors (running out of
// file descriptors fails every accept at once, and a loop that retries at
// once spins and floods the log), and Limit caps how many connections a
// listener has open at once, leaving the rest in the kernel's backlog.
package netguard
