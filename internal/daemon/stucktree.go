package daemon

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpusched/gpusched/internal/procfs"
)

// stuckGrace is how long a dump the daemon makes on its own waits for the
// tree's threads to leave an uninterruptible wait; stuckPoll how often it
// looks.
const (
	stuckGrace = 500 * time.Millisecond
	stuckPoll  = 10 * time.Millisecond
)

// stuckError names a thread of the tree rooted at initPID that stays in an
// uninterruptible wait in the kernel (state D) for grace, or is nil. CRIU
// cannot seize such a thread until it returns: it waits out its own
// collection timeout (10 s) and fails ("Unseizable non-zombie ... found,
// state D", compel/src/lib/infect.c); a thread waiting on a file system of
// its owner's that never answers (a FUSE server of theirs) never returns.
// A frozen tree's other threads are stopped, and a stopped thread enters
// no wait, so what is found here stays.
func stuckError(initPID int, grace time.Duration) error {
	deadline := time.Now().Add(grace)
	for {
		tid, pid := stuckThread(initPID)
		if tid == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("thread %d of process %d of the tree has been in an uninterruptible wait in the kernel (state D) for %v, as on a file system that does not answer: CRIU cannot seize it until it returns", tid, pid, grace)
		}
		time.Sleep(stuckPoll)
	}
}

// errStuck ends stuckThread's walk at the first thread in state D.
var errStuck = errors.New("uninterruptible")

// stuckThread is a thread of the tree rooted at initPID in state D, and
// its process; 0 for none.
func stuckThread(initPID int) (tid, pid int) {
	pids, _ := procfs.TreeOf(initPID)
	for _, p := range pids {
		err := procfs.EachThreadOf(p, func(t int) error {
			if st, err := procfs.ReadStat(t); err == nil && st.State == 'D' {
				tid = t
				return errStuck
			}
			return nil
		})
		if errors.Is(err, errStuck) {
			return tid, p
		}
	}
	return 0, 0
}
