// Package cgroup owns the cgroup v2 side of CPU priority: one cgroup per
// managed process tree whose cpu.weight follows the tree's nice value, so
// that the kernel shares CPU between trees (not only between threads) the
// way their nice values ask.
//
// Detect finds where those cgroups may live: under the daemon's own
// delegated cgroup (systemd Delegate=yes) or under an explicit root. Where
// cgroup v2 or its cpu controller is not available (cgroup v1 and hybrid
// hosts) it says why, and only nice applies.
//
// Users places the tree of a user who has a cgroup of their own (systemd
// delegates user@UID.service to its user) in that cgroup instead, so that
// the user's own limits and accounting cover it. The package imports only the
// standard library and golang.org/x/sys; the daemon decides when trees are
// placed and removed.
package cgroup
