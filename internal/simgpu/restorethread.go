package simgpu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/procfs"
)

// The CUDA driver restores a process on a thread of its own, which it
// starts inside the process. cuda-checkpoint --get-restore-tid ("Retrieves
// the CUDA restore thread ID of the process", its README) and
// cuCheckpointProcessGetRestoreThreadId return that thread's tid, not the
// process's pid: CRIU's log in its commit 02056bf41 reads "Checkpointing
// CUDA devices on pid 84145 restore_tid 84202". The thread has to run for an
// action to proceed: CRIU's CUDA plugin (plugins/cuda/cuda_plugin.c,
// resume_device and cuda_plugin_checkpoint_devices) keeps the whole tree
// seized but PTRACE_CONTs that one thread before it runs cuda-checkpoint
// --action restore, and interrupts it again after, and its README says the
// actions "are facilitated by a CUDA checkpoint+restore thread that the
// CUDA plugin will re-wake when needed". While the thread is stopped the
// tool does not return: CRIU met its own timeout when the processes were
// frozen before cuda-checkpoint ran (checkpoint-restore/criu#2470, #2775).
//
// Here a process gets its restore thread on its first allocation, as cuInit
// starts it (Allocate records it), and RestoreProcess waits while the
// thread is stopped (state T or t in /proc/PID/task/TID/stat: SIGSTOP or a
// ptrace stop) or in a frozen cgroup (cgroup.freeze: criu#2470's frozen
// processes), then goes on once it runs.

// threadPoll is how often a waiting restore looks at the restore thread
// again: nothing reports another process's thread being continued as an
// event (waitid does so only to its parent or tracer).
const threadPoll = 2 * time.Millisecond

// maxTasks bounds the threads read when looking for a restore thread.
const maxTasks = 1 << 12

// ownThread is this process's restore thread, started once.
var ownThread struct {
	once  sync.Once
	nsTID int // its tid in this process's PID namespace (gettid)
}

// ownRestoreThread returns the host and namespace tids of this process's
// restore thread when pid is this process (host pid), starting the thread
// on first use; zeros when pid is another process, whose restore thread is
// its own to start.
func ownRestoreThread(pid int) (tid, nsTID int, err error) {
	self, err := procfs.SelfPID()
	if err != nil || self != pid {
		return 0, 0, nil
	}
	ownThread.once.Do(func() {
		started := make(chan int)
		go runRestoreThread(started)
		ownThread.nsTID = <-started
	})
	// The host tid changes when CRIU restores the process; the namespace
	// tid does not.
	tid, err = hostTID(pid, ownThread.nsTID)
	return tid, ownThread.nsTID, err
}

// runRestoreThread takes an OS thread for good, as a thread of the
// driver's own that runs no application code, and sends its tid. The main
// thread will not do (its tid is the pid): there it starts over on another
// thread, holding the main one meanwhile so that the new goroutine cannot
// get it.
func runRestoreThread(started chan<- int) {
	runtime.LockOSThread()
	if tid := unix.Gettid(); tid != unix.Getpid() {
		started <- tid
		for {
			_ = unix.Pause()
		}
	}
	other := make(chan int)
	go runRestoreThread(other)
	started <- <-other
	runtime.UnlockOSThread()
}

// hostTID finds the thread of process pid whose tid in its innermost PID
// namespace is nsTID, and returns its host tid.
func hostTID(pid, nsTID int) (int, error) {
	dir := procfs.Path(pid, "/task")
	f, err := os.Open(dir)
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	names, err := f.Readdirnames(maxTasks)
	f.Close()
	if err != nil {
		return 0, fmt.Errorf("process %d: threads: %w", pid, err)
	}
	for _, name := range names {
		b, err := procfs.ReadFile(dir+"/"+name+"/status", procfs.MaxStatus)
		if err != nil {
			continue // ended meanwhile
		}
		if ns, ok := innermostNSpid(b); ok && ns == nsTID {
			return strconv.Atoi(name)
		}
	}
	return 0, fmt.Errorf("process %d: no thread %d in its PID namespace: %w", pid, nsTID, ErrNoRestoreThread)
}

// innermostNSpid returns the last field of a status file's NSpid line.
func innermostNSpid(status []byte) (int, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "NSpid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return 0, false
			}
			n, err := strconv.Atoi(f[len(f)-1])
			return n, err == nil
		}
	}
	return 0, false
}

// threadStoppedError is a restore that found its restore thread stopped.
type threadStoppedError struct{ pid, tid int }

func (e *threadStoppedError) Error() string {
	return fmt.Sprintf("process %d: restore: %v (thread %d)", e.pid, ErrRestoreThreadStopped, e.tid)
}

func (e *threadStoppedError) Unwrap() error { return ErrRestoreThreadStopped }

// checkRestoreThread fails unless process pid's restore thread tid exists
// and runs: with a *threadStoppedError when it is stopped.
func checkRestoreThread(pid, tid int) error {
	if tid <= 0 {
		return fmt.Errorf("process %d: restore: %w recorded", pid, ErrNoRestoreThread)
	}
	state, err := threadState(pid, tid)
	if err != nil {
		return fmt.Errorf("process %d: restore: %w", pid, err)
	}
	if stopped(state) || cgroup.FrozenOf(tid) != "" {
		return &threadStoppedError{pid: pid, tid: tid}
	}
	return nil
}

// awaitRestoreThread waits until thread tid of process pid is no longer
// stopped (or gone), or ctx ends.
func awaitRestoreThread(ctx context.Context, pid, tid int) error {
	t := time.NewTicker(threadPoll)
	defer t.Stop()
	for {
		if state, err := threadState(pid, tid); err != nil || !stopped(state) && cgroup.FrozenOf(tid) == "" {
			return nil // the next attempt says what became of it
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (thread %d): %w", ErrRestoreThreadStopped, tid, ctx.Err())
		case <-t.C:
		}
	}
}

// threadState reads the state letter of thread tid of process pid.
func threadState(pid, tid int) (byte, error) {
	b, err := procfs.ReadFile(procfs.Path(pid, "/task/"+strconv.Itoa(tid)+"/stat"), procfs.MaxNumbers)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return 0, fmt.Errorf("thread %d is gone: %w", tid, ErrNoRestoreThread)
	}
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, fmt.Errorf("thread %d: malformed stat", tid)
	}
	return b[i+2], nil
}

// stopped reports a stopped thread: by a signal (T) or under ptrace (t).
func stopped(state byte) bool { return state == 'T' || state == 't' }
