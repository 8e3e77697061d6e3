// Package rlimit owns the resource limits (setrlimit(2)) a managed process
// keeps from its caller: reading every limit of the caller's process from
// /proc/<pid>/limits, checking a recorded set, and putting a set in force
// on the calling process just before it executes the caller's command.
//
// A Set names each resource as prlimit(1) does ("nofile", "nproc", ...)
// and is persisted with the records and jobs it applies to.
package rlimit
