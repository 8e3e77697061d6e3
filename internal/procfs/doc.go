// Package procfs reads process facts from /proc: start times (a pid plus its
// start time identifies a process across pid reuse), parents, the process
// tree below a pid, and the boot id. It never changes anything.
package procfs
