// Package logreader answers a large logs call in a process of its own, a
// log reader, placed in the caller's CPU cgroups: the unified (cgroup2)
// hierarchy's and cgroup v1's cpu and cpuacct ones, where the caller's
// process is. The CPU of reading and encoding a reply of up to 65,536
// lines is then charged where the user's own processes are, and the
// kernel weighs it against the user's share of the machine, not against
// the daemon's, which serves every user.
//
// A reader is the daemon's own binary started as Argv0. It reads its
// Request on stdin, so that it is placed before it does any work, tails
// the log (internal/logfile) and writes the encoded reply
// (internal/logreply) to stdout. It runs as root, like the daemon that
// would otherwise read the log, and does nothing else; a user who may
// write their own cgroup's files (a delegated cgroup) can slow, freeze or
// kill it, which only delays or fails their own call.
package logreader
