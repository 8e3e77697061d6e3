// Package sandbox owns the boundary between the root daemon and the code it
// runs for its callers: the trusted supervisor that heads every managed
// process tree, the handshake that starts it, and the checks made as the
// caller before anything starts.
//
// The threat is the caller's own code. Whatever the command runs may set
// LD_PRELOAD, ptrace anything of its uid, take any descriptor its tree holds
// with pidfd_getfd, write anything to any descriptor it was given and forge
// anything it reports. So:
//
//   - The daemon re-executes its own binary (argv[0] "gpusched-init") as the
//     supervisor: pid 1 of a new PID namespace and a session of its own, in
//     a mount namespace whose /proc is that PID namespace's (mountns.go), with
//     the caller's uid, gid and groups (so that CRIU, running as the caller,
//     may read its limits and dump it) but with capabilities the caller's
//     code lacks, and not dumpable. The kernel then refuses the caller's
//     processes ptrace, pidfd_getfd, /proc/<pid>/mem, environ and fd of it.
//     Its environment is fixed by the daemon; the caller's environment,
//     argv and working directory reach only the final execve of the command.
//   - Every privileged descriptor (the root-owned log and the exit-status
//     file) stays in the supervisor. The command's stdout and stderr are a
//     pipe the supervisor copies into the log, holding it to its size cap by
//     copy-truncate rotation; the caller's code can neither truncate, extend
//     nor fill the log beyond the cap. The pipe lives inside the tree, so it
//     survives a daemon restart and a CRIU dump and restore.
//   - The command is an exec stage (argv[0] "gpusched-exec", our binary
//     again) that the supervisor starts with its own capabilities, after it
//     marked every descriptor it did not open close-on-exec. The stage puts
//     the caller's resource limits in force on itself (the supervisor keeps
//     the daemon's), then, from an OS thread that has dropped every
//     capability, looks the command up, enters its directory and executes
//     it as the caller: nothing privileged is inherited, and until the
//     execve the caller's processes cannot ptrace the stage.
//   - The supervisor alone reaps the command and writes its exit report; the
//     daemon reads the report, and every handshake line, bounded.
//   - The supervisor works in a private directory under the daemon's state
//     directory (root only): CRIU's parasite mounts a proc instance there
//     when it dumps the tree, out of reach of every user.
//
// The start handshake runs over a socketpair (fd 3 of the supervisor):
//
//	supervisor -> daemon  "ready"
//	daemon -> supervisor  "go" JSON          (after the daemon recorded the supervisor's identity)
//	supervisor -> daemon  "started NSPID HOSTPID", or "error MESSAGE" ("notasks MESSAGE" when the kernel refused the process: pids.max)
//
// If the daemon disappears before "go", the supervisor exits without running
// anything, so no process is ever started that the daemon has not recorded.
// The daemon checks that HOSTPID is the supervisor's own child before it
// records it.
package sandbox
