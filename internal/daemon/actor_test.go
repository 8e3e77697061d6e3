package daemon

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/procfs"
)

// selfConn is the accepted end of a Unix connection this process made.
func selfConn(t testing.TB) *net.UnixConn {
	t.Helper()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(t.TempDir(), "s"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	client, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// pidfdPID is the pid a pidfd names (its fdinfo's Pid line; -1 once the
// process is gone).
func pidfdPID(t *testing.T, pidfd int) int {
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Pid:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no Pid line in fdinfo: %s", b)
	return 0
}

// Where the kernel gives the peer as a pidfd, the connection's actor opens
// the connecting process by it, and reads nothing of /proc at accept.
func TestOpenPeerByPeerPIDFD(t *testing.T) {
	if !peerPIDFDs() {
		t.Skip("no SO_PEERPIDFD here (Linux 6.5+)")
	}
	a, err := peerActor(selfConn(t), &userNames{})
	if err != nil {
		t.Fatal(err)
	}
	if a.peerPIDFD == nil || a.PIDStart != 0 || a.PID != os.Getpid() {
		t.Fatalf("actor pid %d, start %d, pidfd getter %v; want this process's pid by SO_PEERPIDFD alone", a.PID, a.PIDStart, a.peerPIDFD != nil)
	}
	pidfd, err := a.openPeer()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if got := pidfdPID(t, pidfd); got != os.Getpid() {
		t.Errorf("the peer's pidfd names pid %d; want %d", got, os.Getpid())
	}
}

// On a kernel without SO_PEERPIDFD the actor is the pid and its start time
// at accept: a pid that names another process since is gone.
func TestOpenPeerByStartTime(t *testing.T) {
	self, err := procfs.StartTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	pidfd, err := actor{PID: os.Getpid(), PIDStart: self}.openPeer()
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(pidfd)

	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []actor{
		{PID: os.Getpid(), PIDStart: self + 1}, // another process with this pid
		{PID: os.Getpid()},                     // start time unread
		{PID: exited.Process.Pid, PIDStart: self},
		{},
	} {
		if fd, err := a.openPeer(); !errors.Is(err, procfs.ErrGone) {
			if err == nil {
				unix.Close(fd)
			}
			t.Errorf("openPeer of pid %d started at %d: %v; want gone", a.PID, a.PIDStart, err)
		}
	}
}

// BenchmarkPeerActor is the per-connection cost of knowing the peer: with
// SO_PEERPIDFD (the pidfd taken only when a call needs it) and with the
// start time read from /proc at accept.
func BenchmarkPeerActor(b *testing.B) {
	c := selfConn(b)
	names := &userNames{}
	for _, pidfds := range []bool{true, false} {
		name := map[bool]string{true: "peer-pidfd", false: "start-time"}[pidfds]
		b.Run(name, func(b *testing.B) {
			if pidfds && !peerPIDFDs() {
				b.Skip("no SO_PEERPIDFD here")
			}
			saved := peerPIDFDs
			peerPIDFDs = func() bool { return pidfds }
			defer func() { peerPIDFDs = saved }()
			for b.Loop() {
				if _, err := peerActor(c, names); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
