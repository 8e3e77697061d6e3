package daemon

import (
	"bytes"
	"os"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/sandbox"
)

// sweepUntrackedTrees kills the process trees of this daemon that no live
// record tracks: a daemon killed between starting a tree (a run, a restore
// from disk, a fork copy) and recording it left one running behind the
// table's back, holding GPU memory, while its record says it never started
// or is still on disk. A tree is this daemon's when its root is a
// supervisor (sandbox.Argv0, holding the supervisor's capabilities, which
// no caller's process can) whose environment is this daemon's mark;
// SIGKILL to a PID namespace's init ends the whole tree.
func (d *Daemon) sweepUntrackedTrees() {
	tracked := map[int]bool{}
	for _, r := range d.table.View().Records {
		if r.Live() && r.InitPID > 0 {
			tracked[r.InitPID] = true
		}
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	argv0 := []byte(sandbox.Argv0 + "\x00")
	mark := []byte(d.sandboxMark() + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || tracked[pid] {
			continue
		}
		if !bytes.Equal(readProcHead(pid, "cmdline", len(argv0)), argv0) ||
			!bytes.Equal(readProcHead(pid, "environ", len(mark)+1), mark) ||
			!sandbox.HasSupervisorCaps(pid) {
			continue
		}
		err = unix.Kill(pid, unix.SIGKILL)
		d.log.Warn("killed a process tree that no record tracks", zap.Int("init_pid", pid), zap.Error(err))
	}
}

// readProcHead is the first n bytes (at most) of /proc/<pid>/<name>: a
// process's command line and environment are its own to make as large as
// it likes.
func readProcHead(pid int, name string, n int) []byte {
	b, _ := procfs.ReadFile("/proc/"+strconv.Itoa(pid)+"/"+name, n)
	return b
}
