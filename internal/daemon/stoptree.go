package daemon

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// stopRounds bounds how often sigstopTree lists a tree again for children
// forked by processes it had signalled but that had not stopped yet.
const stopRounds = 8

// stopWait bounds how long sigstopTree waits for signalled processes to stop.
const stopWait = time.Second

// stopTree stops the tree under initPID, whose processes run as uid (see
// sigstopTree), at a moment when none of them is inside a GPU driver call.
func (d *Daemon) stopTree(initPID int, uid uint32) ([]proctable.ProcRef, error) {
	var stopped []proctable.ProcRef
	var err error
	if berr := d.gpus.BetweenCalls(uid, func() { stopped, err = sigstopTree(initPID, stopWait) }); berr != nil {
		return nil, berr
	}
	return stopped, err
}

// sigstopTree stops every process of the tree under initPID with SIGSTOP and
// returns them, so that continueTree resumes exactly those without listing
// the tree again. It returns once each of them has stopped (SIGSTOP takes
// effect asynchronously; each round waits at most limit), listing the tree
// again for children forked in between, so that nothing of the tree runs
// on after it returns.
func sigstopTree(initPID int, limit time.Duration) ([]proctable.ProcRef, error) {
	var stopped []proctable.ProcRef
	signalled := map[int]bool{}
	for range stopRounds {
		pids, err := procfs.TreeOf(initPID)
		if err != nil {
			return stopped, err
		}
		var fresh []proctable.ProcRef
		for _, pid := range pids {
			if signalled[pid] {
				continue
			}
			start, err := procfs.StartTime(pid)
			if err != nil {
				continue // gone
			}
			ref := proctable.ProcRef{PID: pid, Start: start}
			if err := signalRef(ref, unix.SIGSTOP); err != nil {
				return stopped, err
			}
			signalled[pid] = true
			stopped = append(stopped, ref)
			fresh = append(fresh, ref)
		}
		if len(fresh) == 0 {
			return stopped, nil
		}
		if err := waitStopped(fresh, limit); err != nil {
			return stopped, err
		}
	}
	return stopped, nil
}

// waitStopped polls /proc until every thread of every process of refs is
// stopped or gone. A process's state there is its first thread's; each
// other thread stops on its own way back to user space, and one that the
// signal woke from a wait first takes what came meanwhile (pipe_read and
// flock look for their data or lock before signals): a simulated process's
// thread waiting for its user's lock could take it and stop holding it. Nothing
// reports another process's stop as an event (waitid does only to its
// parent), and a signalled thread stops within microseconds.
func waitStopped(refs []proctable.ProcRef, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, ref := range refs {
		if st, err := procfs.ReadStat(ref.PID); err != nil || st.StartTime != ref.Start {
			continue // gone, or its pid is another's (a first thread gone before the others is not)
		}
		err := procfs.EachThreadOf(ref.PID, func(tid int) error {
			for {
				st, err := procfs.ReadStat(tid)
				if err != nil || st.State == 'T' || st.State == 't' || st.State == 'Z' || st.State == 'X' {
					return nil
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("pid %d (thread %d) has not stopped %v after SIGSTOP (state %c)", ref.PID, tid, limit, st.State)
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
		if err != nil && !errors.Is(err, procfs.ErrGone) {
			return err
		}
	}
	return nil
}

// stoppedIn lists the processes of the tree under initPID that are
// stopped: after a crash, what a freeze had stopped without recording it.
func stoppedIn(initPID int) []proctable.ProcRef {
	pids, err := procfs.TreeOf(initPID)
	if err != nil {
		return nil
	}
	var out []proctable.ProcRef
	for _, pid := range pids {
		if st, err := procfs.ReadStat(pid); err == nil && (st.State == 'T' || st.State == 't') {
			out = append(out, proctable.ProcRef{PID: pid, Start: st.StartTime})
		}
	}
	return out
}

// continueTree sends SIGCONT to what stopTree stopped; processes that
// exited since are skipped.
func continueTree(stopped []proctable.ProcRef) error {
	var errs []error
	for _, ref := range stopped {
		errs = append(errs, signalRef(ref, unix.SIGCONT))
	}
	return errors.Join(errs...)
}

// signalRef signals a process through a pidfd, unless it has exited or its
// pid now names another process.
func signalRef(ref proctable.ProcRef, sig unix.Signal) error {
	fd, err := unix.PidfdOpen(ref.PID, 0)
	if err != nil {
		return nil // gone
	}
	defer unix.Close(fd)
	if !procfs.Alive(ref.PID, ref.Start) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal pid %d: %w", ref.PID, err)
	}
	return nil
}
