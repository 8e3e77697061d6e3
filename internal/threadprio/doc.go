// Package threadprio runs a goroutine's work on an OS thread of background
// CPU priority (nice 19), for the daemon's bulk work: the kernel then lets
// any of the daemon's other threads that wakes (the next request, the
// network poller) run ahead of it on its CPU, where at the same priority
// it would wait out the bulk thread's time slice. Priority is per thread
// on Linux (setpriority with a thread id), so the goroutine is locked to
// its thread while lowered.
package threadprio
