package daemon

import (
	"bytes"
	"os"
	"strconv"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/nsinit"
)

// sweepUntrackedTrees kills the process trees of this daemon that no live
// record tracks: a daemon killed between starting a tree (a run, a restore
// from disk, a fork copy) and recording it left one running behind the
// table's back, holding GPU memory, while its record says it never started
// or is still on disk. A tree is this daemon's when its init runs as
// nsinit.Argv0 with this daemon's socket in its environment; SIGKILL to a
// PID namespace's init ends the whole tree.
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
	mark := []byte("\x00GPUSCHED_SOCKET=" + d.cfg.Socket + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || tracked[pid] {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(cmd, []byte(nsinit.Argv0+"\x00")) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), mark) {
			continue
		}
		err = unix.Kill(pid, unix.SIGKILL)
		d.log.Warn("killed a process tree that no record tracks", zap.Int("init_pid", pid), zap.Error(err))
	}
}
