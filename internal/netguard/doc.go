// Package netguard keeps a listener's accept loop from being turned
// against the daemon: Retry backs off on accept errors (running out of
// file descriptors fails every accept at once, and a loop that retries at
// once spins and floods the log), Limit caps how many connections a
// listener has open at once, leaving the rest in the kernel's backlog, and
// an Acceptor refuses a connection past the daemon's caps for a few system
// calls, before it is a net.Conn, so that one opened in a loop costs the
// daemon as little as can be.
package netguard
