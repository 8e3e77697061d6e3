package procfs

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ownProc is the process's own /proc.
const ownProc = "/proc"

// root is the proc mount this package reads: the process's own /proc, or
// the host's that a process in a managed tree was given (UseHostProc).
var root = ownProc

// UseHostProc makes this package read dir instead of /proc when dir is a
// proc mount, and reports whether it does. A managed tree has a /proc of
// its own PID namespace; the simulated driver's jobs, which report host
// pids as NVML does, find the host's bound at a directory of the sim
// directory (internal/sandbox). Call it first thing in main: nothing
// guards root against concurrent use.
func UseHostProc(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.PROC_SUPER_MAGIC {
		return false
	}
	root = dir
	return true
}

// Path is the path of rest ("/stat", "/task") in pid's directory of the
// proc mount this package reads.
func Path(pid int, rest string) string {
	return root + "/" + strconv.Itoa(pid) + rest
}

// fileOf is the path of pid's file rest ("/stat", "/status") to read. A
// process reading the host's /proc through UseHostProc reads its own files
// through its own /proc instead, which CRIU can restore should a dump meet
// one open (SelfPID says why); the pids in them are its namespace's.
func fileOf(pid int, rest string) string {
	if root != ownProc {
		if self, err := os.Readlink(root + "/self"); err == nil && self == strconv.Itoa(pid) {
			return ownProc + "/self" + rest
		}
	}
	return Path(pid, rest)
}
