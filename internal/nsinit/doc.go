// Package nsinit owns the tiny init that heads every managed process tree
// and the handshake that starts it.
//
// The daemon re-executes its own binary (argv[0] "gpusched-init") in a new
// PID namespace and a new session, as the caller's uid/gid/groups, with the
// process's log file as stdout/stderr. The init is pid 1 of its namespace:
// it forwards termination signals to every process of the namespace, reaps
// zombies, and exits with its command's status, which it also writes to a
// status file so that a daemon that restarted meanwhile still learns how the
// command ended. Because the whole tree lives in its own namespace, CRIU can
// later dump it by the init's pid and restore it without pid conflicts, and
// SIGKILL to the init ends the whole tree.
//
// The start handshake runs over a socketpair (fd 4 in the init):
//
//	init -> daemon  "ready"
//	daemon -> init  "go"           (after the daemon recorded the init's identity)
//	init -> daemon  "started NSPID HOSTPID" or "error MESSAGE"
//
// If the daemon disappears before "go", the init exits without running
// anything, so no process is ever started that the daemon has not recorded.
package nsinit
