package sandbox

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// The supervisor starts in a mount namespace of its own (CLONE_NEWNS, a
// copy of the daemon's) so that its tree can have a /proc of its own PID
// namespace. NVIDIA's libcuda needs one: cuInit opens
// /proc/self/task/<gettid()>/comm, and with the host's /proc, /proc/self is
// the host pid's directory while gettid() is the namespace tid, so the file
// is missing and cuInit fails with CUDA_ERROR_OPERATING_SYSTEM (304, "OS
// call failed or operation not supported on this OS"). Seen on an H200
// (driver 580.159.04) under `unshare --pid --fork`; with `--mount-proc` it
// ran, and cuda-checkpoint from the host checkpointed and restored it
// (docs/hardware.md, "The tree's own /proc").

// ownProc makes the supervisor's mounts slaves of the host's (mounts made
// here never propagate out; the host's still propagate in), binds the
// host's /proc at hostProcAt when it is set (the simulated driver's jobs
// report host pids, as NVML does, and read them there), and mounts a proc
// of the supervisor's PID namespace on /proc. It returns the host's /proc,
// opened before the mount, for the one host-pid lookup the supervisor
// makes; the caller closes it before the tree can be dumped.
func ownProc(hostProcAt string) (hostProc int, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return -1, fmt.Errorf("mount namespace: make / a slave: %w", err)
	}
	hostProc, err = unix.Open("/proc", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the host's /proc: %w", err)
	}
	fail := func(err error) (int, error) {
		unix.Close(hostProc)
		return -1, err
	}
	if hostProcAt != "" {
		if err := unix.Mount("/proc", hostProcAt, "", unix.MS_BIND, ""); err != nil {
			return fail(fmt.Errorf("bind the host's /proc at %s: %w", hostProcAt, err))
		}
		const ro = unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
		if err := unix.Mount("", hostProcAt, "", ro, ""); err != nil {
			return fail(fmt.Errorf("make %s read-only: %w", hostProcAt, err))
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail(fmt.Errorf("mount the tree's /proc: %w", err))
	}
	if err := reopenInherited(); err != nil {
		return fail(err)
	}
	return hostProc, nil
}

// reopenInherited reopens, through this namespace's mounts, the files the
// daemon opened through its own: CRIU names a file by its mount, and a
// descriptor opened before CLONE_NEWNS names a mount this namespace does
// not have ("Can't lookup mount=N for fd=M", criu/files-reg.c), so the
// tree could not be dumped. Each is reopened by the path its descriptor
// names, with no symlink followed, and kept only when it is the same file.
func reopenInherited() error {
	if err := reopenAt(0, "/dev/null", unix.O_RDONLY); err != nil {
		return err
	}
	for _, fd := range []int{logFD, statusFD} {
		path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			return fmt.Errorf("reopen descriptor %d: %w", fd, err)
		}
		fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		if err != nil {
			return fmt.Errorf("reopen descriptor %d: %w", fd, err)
		}
		if err := reopenAt(fd, path, fl&(unix.O_ACCMODE|unix.O_APPEND)); err != nil {
			return err
		}
	}
	if err := unix.Dup3(logFD, 2, unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("reopen descriptor 2: %w", err)
	}
	return nil
}

// reopenAt opens path with flags and puts it at fd (close-on-exec) when it
// is the file fd already holds.
func reopenAt(fd int, path string, flags int) error {
	var was unix.Stat_t
	if err := unix.Fstat(fd, &was); err != nil {
		return fmt.Errorf("reopen descriptor %d: %w", fd, err)
	}
	nfd, err := unix.Openat2(unix.AT_FDCWD, path, &unix.OpenHow{
		// Non-blocking, so that a FIFO put in its place cannot hang the open.
		Flags:   uint64(flags | unix.O_NOCTTY | unix.O_NONBLOCK | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("reopen descriptor %d (%s): %w", fd, path, err)
	}
	defer unix.Close(nfd)
	var now unix.Stat_t
	if err := unix.Fstat(nfd, &now); err != nil {
		return fmt.Errorf("reopen descriptor %d: %w", fd, err)
	}
	if now.Dev != was.Dev || now.Ino != was.Ino {
		return fmt.Errorf("reopen descriptor %d: %s is no longer the file it held", fd, path)
	}
	if _, err := unix.FcntlInt(uintptr(nfd), unix.F_SETFL, flags&unix.O_APPEND); err != nil {
		return fmt.Errorf("reopen descriptor %d: %w", fd, err)
	}
	if err := unix.Dup3(nfd, fd, unix.O_CLOEXEC); err != nil {
		return fmt.Errorf("reopen descriptor %d: %w", fd, err)
	}
	return nil
}
