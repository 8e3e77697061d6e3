package daemon

import (
	"fmt"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// refuseUnrestorableFiles refuses to dump a stopped tree that holds open a
// /proc file CRIU would image but never reopen on restore, so that the
// process would be stuck on disk:
//   - a file of a thread's /proc directory (procfs.ThreadFiles);
//   - a file of the host's /proc, bound in the tree at hostProc for the
//     simulated GPUs: its pids are others after a restore ("Can't open
//     file .../hostproc/<pid>/timens_offsets on restore", criu/files-reg.c).
//
// Such a file is usually held for an instant (pthread_setname_np, a
// simulated cuInit or a start time read caught mid-way by a freeze), so a
// retry soon succeeds. A fd table that cannot be read is left to CRIU,
// which reads it next.
func (d *Daemon) refuseUnrestorableFiles(name string, stopped []proctable.ProcRef) error {
	hostProc := d.simHostProc()
	underHostProc := func(path string) bool { return strings.HasPrefix(path, hostProc+"/") }
	for _, p := range stopped {
		if files, _ := procfs.ThreadFiles(p.PID, 3); len(files) > 0 {
			return heldProcFiles(name, files, "in the /proc directory of one of its threads; CRIU reopens a "+
				"process's files before it recreates its threads")
		}
		if hostProc == "" {
			continue
		}
		if files, _ := procfs.OpenFiles(p.PID, 3, underHostProc); len(files) > 0 {
			return heldProcFiles(name, files, "in the host's /proc, bound in the tree for the simulated GPUs; "+
				"its pids are others after a restore")
		}
	}
	return nil
}

func heldProcFiles(name string, files []string, why string) error {
	return fmt.Errorf("%w: process %q holds %s open, %s, so that image could never be restored: "+
		"close the file (or try again once it is closed) before hibernating or forking",
		checkpoint.ErrNotCheckpointable, name, strings.Join(files, ", "), why)
}
