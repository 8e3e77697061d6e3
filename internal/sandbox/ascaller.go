package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Cred is whom a tree runs as.
type Cred struct {
	UID, GID uint32
	Groups   []uint32
}

// AsCaller runs fn on an OS thread whose filesystem identity is c (fsuid,
// fsgid and supplementary groups; changing the fsuid from 0 drops the
// thread's file capabilities): whatever fn stats, opens or checks is
// allowed or refused as it would be for the caller, so that a root-side
// check never tells a caller whether a path it may not see exists. The
// thread is never reused: it ends with fn.
func AsCaller(c Cred, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if err := setThreadFSCred(c); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setThreadFSCred sets the calling thread's groups, fsgid and fsuid with
// raw system calls, which (unlike the libc and syscall wrappers) change
// only this thread.
func setThreadFSCred(c Cred) error {
	var groups unsafe.Pointer
	if len(c.Groups) > 0 {
		groups = unsafe.Pointer(&c.Groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(c.Groups)), uintptr(groups), 0); e != 0 {
		return fmt.Errorf("set groups of the checking thread: %w", e)
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(c.GID), 0, 0)
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0); uint32(got) != c.GID {
		return fmt.Errorf("set fsgid %d of the checking thread: still %d", c.GID, got)
	}
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(c.UID), 0, 0)
	if got, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0); uint32(got) != c.UID {
		return fmt.Errorf("set fsuid %d of the checking thread: still %d", c.UID, got)
	}
	return nil
}

// CheckCommand checks, as the caller c, that dir is a directory it may
// enter and that argv0 resolves (in path, relative to dir) to a file it may
// execute. The errors say no more than the caller could find out itself.
func CheckCommand(c Cred, argv0, path, dir string) error {
	return AsCaller(c, func() error {
		if err := searchable(dir); err != nil {
			return fmt.Errorf("dir %s: %w", dir, err)
		}
		_, err := LookPath(argv0, path, dir)
		return err
	})
}
