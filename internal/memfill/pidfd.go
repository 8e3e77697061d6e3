package memfill

import (
	"context"
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// waitExit waits under ctx until the process of pidfd has exited.
func waitExit(ctx context.Context, pidfd *os.File) error {
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = pidfd.SetReadDeadline(time.Now()) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0 || (err != nil && !errors.Is(err, unix.EINTR))
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
