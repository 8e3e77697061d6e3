// Package taskreserve keeps some of the tasks (processes and threads) the
// daemon's cgroup may hold for the daemon itself. The managed trees that
// run in the daemon's cgroups go into one pids cgroup whose pids.max is
// the most the daemon's cgroup may hold (systemd's TasksMax=, or the
// kernel's pid_max and threads-max) less the reserve.
//
// Without it a tree that forks until that limit stops the daemon: the Go
// runtime aborts when it cannot start a thread ("pthread_create failed:
// Resource temporarily unavailable"), and since the tree outlives the
// daemon, every daemon started after it aborts too.
//
// On a cgroup v2 host the trees' cgroups are cgroup.Manager's (one per
// tree, for cpu.weight) and the pids cgroup is their parent; on a cgroup
// v1 or hybrid host it is a cgroup of the v1 pids hierarchy below the
// daemon's own, which trees are moved into. The package imports only the
// standard library and golang.org/x/sys.
package taskreserve
