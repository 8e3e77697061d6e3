package daemon

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/internal/proctable"
)

// stopTree stops every process of the tree under initPID with SIGSTOP and
// returns them, so that continueTree resumes exactly those without another
// scan of /proc.
func stopTree(initPID int) ([]proctable.ProcRef, error) {
	tree, err := procfs.ScanTree()
	if err != nil {
		return nil, err
	}
	var stopped []proctable.ProcRef
	for _, pid := range append([]int{initPID}, tree.Descendants(initPID)...) {
		start, err := procfs.StartTime(pid)
		if err != nil {
			continue // gone
		}
		ref := proctable.ProcRef{PID: pid, Start: start}
		if err := signalRef(ref, unix.SIGSTOP); err != nil {
			return stopped, err
		}
		stopped = append(stopped, ref)
	}
	return stopped, nil
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
