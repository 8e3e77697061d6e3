package daemon

import (
	"fmt"
	"net"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
	"github.com/gpusched/gpusched/pkg/api"
)

// actor is the peer of one connection, as the kernel vouches for it.
type actor struct {
	UID    uint32
	GID    uint32
	Groups []uint32
	PID    int
	User   string
	// peerPIDFD opens a pidfd of the connecting process (SO_PEERPIDFD,
	// Linux 6.5+): the socket keeps that process's struct pid, so the
	// pidfd names it, not a later process given its pid. nil on older
	// kernels, where PIDStart stands in.
	peerPIDFD func() (int, error)
	// PIDStart is PID's start time when the connection was accepted, on a
	// kernel without SO_PEERPIDFD (0 when it could not be read): with PID,
	// the identity of the connecting process, which a reused pid does not
	// share.
	PIDStart uint64
}

func (a actor) root() bool { return a.UID == 0 }

// owns reports whether a may act on something owned by uid.
func (a actor) owns(uid uint32) bool { return a.UID == 0 || a.UID == uid }

func (a actor) identity() api.Identity {
	return api.Identity{UID: a.UID, GID: a.GID, Groups: a.Groups, User: a.User, PID: a.PID}
}

// peerActor reads SO_PEERCRED and SO_PEERGROUPS of a Unix connection.
func peerActor(c *net.UnixConn, names *userNames) (actor, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return actor{}, err
	}
	var a actor
	var opErr error
	err = rc.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			opErr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		a = actor{UID: cred.Uid, GID: cred.Gid, PID: int(cred.Pid)}
		a.Groups, opErr = peerGroups(int(fd))
	})
	if err == nil {
		err = opErr
	}
	if err != nil {
		return actor{}, err
	}
	a.User = names.name(a.UID)
	switch {
	case a.PID <= 0:
	case peerPIDFDs():
		a.peerPIDFD = func() (int, error) { return peerPIDFD(rc) }
	default:
		a.PIDStart, _ = procfs.StartTime(a.PID)
	}
	return a, nil
}

// openPeer is a pidfd of the process that connected, or procfs.ErrGone
// where it has exited or, on a kernel without SO_PEERPIDFD, its pid names
// another process now.
func (a actor) openPeer() (int, error) {
	gone := fmt.Errorf("pid %d: %w", a.PID, procfs.ErrGone)
	if a.PID <= 0 {
		return -1, gone
	}
	if a.peerPIDFD != nil {
		pidfd, err := a.peerPIDFD()
		if err != nil {
			return -1, gone
		}
		return pidfd, nil
	}
	if a.PIDStart == 0 {
		return -1, gone
	}
	pidfd, err := unix.PidfdOpen(a.PID, 0)
	if err != nil {
		return -1, gone
	}
	if start, err := procfs.StartTime(a.PID); err != nil || start != a.PIDStart {
		unix.Close(pidfd)
		return -1, gone
	}
	return pidfd, nil
}

// soPeerPIDFD is SO_PEERPIDFD (include/uapi/asm-generic/socket.h, Linux
// 6.5), which golang.org/x/sys does not name yet.
const soPeerPIDFD = 77

// peerPIDFD is a pidfd (close-on-exec) of the process that connected the
// socket behind rc.
func peerPIDFD(rc syscall.RawConn) (int, error) {
	pidfd, opErr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		pidfd, opErr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, soPeerPIDFD)
	}); err != nil {
		return -1, err
	}
	return pidfd, opErr
}

// peerPIDFDs reports whether the kernel gives a Unix socket's peer as a
// pidfd (SO_PEERPIDFD).
var peerPIDFDs = sync.OnceValue(func() bool {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	pidfd, err := unix.GetsockoptInt(fds[0], unix.SOL_SOCKET, soPeerPIDFD)
	if err != nil {
		return false
	}
	unix.Close(pidfd)
	return true
})

// peerGroups reads the peer's supplementary groups (SO_PEERGROUPS).
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch e {
		case 0:
			return append([]uint32{}, buf[:n/4]...), nil
		case unix.ERANGE:
			buf = make([]uint32, n/4+1)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}

// userNames caches uid -> user name lookups.
type userNames struct {
	mu sync.Mutex
	m  map[uint32]string
}

func (u *userNames) name(uid uint32) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if n, ok := u.m[uid]; ok {
		return n
	}
	n := strconv.FormatUint(uint64(uid), 10)
	if usr, err := user.LookupId(n); err == nil {
		n = usr.Username
	}
	if u.m == nil {
		u.m = map[uint32]string{}
	}
	u.m[uid] = n
	return n
}
