package daemon

import (
	"fmt"
	"strings"

	"github.com/gpusched/gpusched/internal/checkpoint"
	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// refuseThreadFiles refuses to dump a stopped tree that holds a file of a
// thread's /proc directory open: CRIU would image it, but never restore it
// (procfs.ThreadFiles), and the process would be stuck on disk. Such a
// file is usually held for an instant (pthread_setname_np, or a simulated
// cuInit caught mid-way by a freeze), so a retry soon succeeds. A fd table
// that cannot be read is left to CRIU, which reads it next.
func refuseThreadFiles(name string, stopped []proctable.ProcRef) error {
	for _, p := range stopped {
		files, _ := procfs.ThreadFiles(p.PID, 3)
		if len(files) > 0 {
			return fmt.Errorf("%w: process %q holds %s open, in the /proc directory of one of its threads; CRIU reopens a "+
				"process's files before it recreates its threads, so that image could never be restored: "+
				"close the file (or try again once it is closed) before hibernating or forking",
				checkpoint.ErrNotCheckpointable, name, strings.Join(files, ", "))
		}
	}
	return nil
}
