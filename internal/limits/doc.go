// Package limits holds what keeps one local user from taking the daemon or
// the GPUs away from the others: the refusal a per-user cap gives
// (Exceeded, answered as resource_exhausted), per-user slot counters for
// what a user holds at once (connections, streams), and Fair, which shares
// a server's few places among the users whose requests wait for them.
//
// The caps themselves are config.Limits; the daemon counts what it keeps
// (processes, jobs, leases, fillers) and asks Check.
package limits
