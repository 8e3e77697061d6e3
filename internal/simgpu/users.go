package simgpu

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// Each user has a record directory, procs/<uid>/, and a lock file,
// locks/<uid>, both theirs and made by root: a user can write only their
// own records, and take only their own lock.

// lockPause bounds the pause between two tries of a lock that has a wait
// limit: flock has no timeout, and nothing signals its release.
const lockPause = 10 * time.Millisecond

func (r *Registry) userDir(uid uint32) string {
	return filepath.Join(r.dir, procsName, strconv.FormatUint(uint64(uid), 10))
}

func (r *Registry) lockPath(uid uint32) string {
	return filepath.Join(r.dir, locksName, strconv.FormatUint(uint64(uid), 10))
}

// AddUser makes uid's record directory (0755) and lock file (0600), owned
// by uid, or puts their owner and mode back. It needs root: the daemon
// calls it before it starts a process for uid, so that the process can
// register itself. Root's own calls make what they need as they go.
func (r *Registry) AddUser(uid uint32) error {
	dir := r.userDir(uid)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	if fi, err := os.Lstat(dir); err != nil {
		return fmt.Errorf("sim dir %s: %w", r.dir, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("sim dir %s: %s is not a directory", r.dir, dir)
	}
	if err := os.Lchown(dir, int(uid), -1); err != nil {
		return fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	fd, err := unix.Open(r.lockPath(uid), unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return fmt.Errorf("sim dir %s: lock of uid %d: %w", r.dir, uid, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchown(fd, int(uid), -1); err != nil {
		return fmt.Errorf("sim dir %s: lock of uid %d: %w", r.dir, uid, err)
	}
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fmt.Errorf("sim dir %s: lock of uid %d: %w", r.dir, uid, err)
	}
	return nil
}

// ensureUser makes uid's directory and lock when root calls and they are
// missing; for anyone else they must be there already.
func (r *Registry) ensureUser(uid uint32) error {
	if _, err := os.Lstat(r.lockPath(uid)); err == nil {
		if _, err := os.Lstat(r.userDir(uid)); err == nil {
			return nil
		}
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("sim dir %s: uid %d: %w", r.dir, uid, ErrNoUserDir)
	}
	return r.AddUser(uid)
}

// ownerOf returns the uid process pid runs as (its real uid): the user
// whose directory holds its record and whose lock guards it.
func ownerOf(pid int) (uint32, error) {
	if pid <= 0 {
		return 0, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	uid, err := procfs.RealUID(pid)
	if errors.Is(err, procfs.ErrGone) {
		return 0, fmt.Errorf("process %d: %w", pid, ErrNoSuchProcess)
	}
	return uid, err
}

// lockedUser runs fn holding uid's lock, waiting for it at most the
// Registry's wait limit.
func (r *Registry) lockedUser(uid uint32, fn func() error) error {
	fd, err := r.lockUser(uid, false)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn()
}

// lockedState runs fn holding root's lock: only root writes the state
// files (metrics.json, faults.json), and this keeps its writers from
// losing each other's changes.
func (r *Registry) lockedState(fn func() error) error { return r.lockedUser(0, fn) }

// tryLockedUser runs fn if uid's lock is free (and the caller may take
// it), and reports whether it did.
func (r *Registry) tryLockedUser(uid uint32, fn func()) bool {
	fd, err := r.lockUser(uid, true)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	fn()
	return true
}

// lockedOwner runs fn holding the lock of pid's owner, with that owner.
func (r *Registry) lockedOwner(pid int, fn func(uid uint32) error) error {
	uid, err := ownerOf(pid)
	if err != nil {
		return err
	}
	return r.lockedUser(uid, func() error { return fn(uid) })
}

// lockUser opens uid's lock file and flocks it; closing the fd releases
// the lock. A fresh open file description per call makes goroutines
// exclude each other as well as processes. Without nonblock it waits at
// most r.wait (when set), then fails with ErrLockHeld.
func (r *Registry) lockUser(uid uint32, nonblock bool) (int, error) {
	if err := r.ensureUser(uid); err != nil {
		return -1, err
	}
	path := r.lockPath(uid)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return -1, fmt.Errorf("sim dir %s: lock of uid %d: %w", r.dir, uid, err)
	}
	err = flock(fd, nonblock, r.wait)
	if errors.Is(err, unix.EWOULDBLOCK) && !nonblock {
		err = fmt.Errorf("%w: uid %d's lock, held for over %v: a process of that user is inside a simulated driver call or keeps the lock",
			ErrLockHeld, uid, r.wait)
	}
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("sim dir %s: %w", r.dir, err)
	}
	return fd, nil
}

// flock takes an exclusive lock on fd: at once or EWOULDBLOCK with
// nonblock; otherwise waiting, at most wait when it is set (then
// EWOULDBLOCK).
func flock(fd int, nonblock bool, wait time.Duration) error {
	how := unix.LOCK_EX
	if nonblock || wait > 0 {
		how |= unix.LOCK_NB
	}
	deadline := time.Now().Add(wait)
	pause := 100 * time.Microsecond
	for {
		err := unix.Flock(fd, how)
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EWOULDBLOCK) && !nonblock && time.Now().Before(deadline):
			time.Sleep(pause)
			pause = min(2*pause, lockPause)
		default:
			return err
		}
	}
}
