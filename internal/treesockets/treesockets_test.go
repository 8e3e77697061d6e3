package treesockets

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/testutil"
)

// holder starts a process holding files (closed here) from its fd 3 on.
func holder(t *testing.T, files ...*os.File) int {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for _, f := range files {
		f.Close()
	}
	return cmd.Process.Pid
}

// tableUID is the uid /proc/net/tcp gives the socket listening on port.
func tableUID(t *testing.T, port int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) > 9 && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", port)) && f[3] == "0A" {
			return f[7]
		}
	}
	t.Fatalf("nothing listens on port %d", port)
	return ""
}

// TestOwnGivesSocketsToTheOwner: sockets a process holds, made by root
// (as CRIU makes a restored tree's), become the owner's: a listener's
// uid in /proc/net/tcp, and a socket kept unbound can no longer join a
// SO_REUSEPORT group of root's (red team H2: one kept through a thaw and
// bound later took half of root's connections).
func TestOwnGivesSocketsToTheOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	l, port := testutil.ReusePortListener(t, 0)
	_, rootsPort := testutil.ReusePortListener(t, 0) // root's service
	spare, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	pid := holder(t, l, os.NewFile(uintptr(spare), "spare"))
	if uid := tableUID(t, port); uid != "0" {
		t.Fatalf("before: uid %s", uid)
	}
	if err := Own([]int{pid}, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if uid := tableUID(t, port); uid != "4242" {
		t.Fatalf("after Own: uid %s, want 4242", uid)
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, 4, 0) // the spare socket
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: rootsPort, Addr: [4]byte{127, 0, 0, 1}}); !errors.Is(err, unix.EADDRINUSE) {
		t.Fatalf("the spare socket's SO_REUSEPORT bind to root's port: %v, want EADDRINUSE", err)
	}
}

// TestOwnRefusesAPortShared: a tree's listener bound to the port of a
// listener outside it (as CRIU's forced SO_REUSEPORT let it join root's)
// is refused with ErrShared; one on a port of its own is not.
func TestOwnRefusesAPortShared(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	_, port := testutil.ReusePortListener(t, 0) // outside the tree
	inside, _ := testutil.ReusePortListener(t, port)
	pid := holder(t, inside)
	if err := Own([]int{pid}, 4242, 4242); !errors.Is(err, ErrShared) || !strings.Contains(err.Error(), "port "+strconv.Itoa(port)) {
		t.Fatalf("Own: %v, want ErrShared naming port %d", err, port)
	}
	own, _ := testutil.ReusePortListener(t, 0)
	alone := holder(t, own)
	if err := Own([]int{alone}, 4242, 4242); err != nil {
		t.Fatalf("a listener of its own port: %v", err)
	}
}

// TestTakenSeesEveryTableAndMappedAddresses: a port held by a UDP-Lite
// socket (a table of its own, red team J1) and one held on 127.0.0.1
// against an IPv4-mapped IPv6 bind of the same (J2) are taken; a free port
// is not.
func TestTakenSeesEveryTableAndMappedAddresses(t *testing.T) {
	lite, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDPLITE)
	if err != nil {
		t.Skipf("no UDP-Lite: %v", err)
	}
	defer unix.Close(lite)
	if err := unix.Bind(lite, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(lite)
	if err != nil {
		t.Fatal(err)
	}
	litePort := uint16(sa.(*unix.SockaddrInet4).Port)
	six, err := unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no IPv6: %v", err)
	}
	defer unix.Close(six)
	if err := unix.Bind(six, &unix.SockaddrInet6{Addr: netip.MustParseAddr("::ffff:127.0.0.1").As16()}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(six, 1); err != nil {
		t.Fatal(err)
	}
	sa6, err := unix.Getsockname(six)
	if err != nil {
		t.Fatal(err)
	}
	mappedPort := uint16(sa6.(*unix.SockaddrInet6).Port)
	loop := netip.MustParseAddr("127.0.0.1")
	for _, b := range []Bound{
		{Proto: "udplite", Addr: loop, Port: litePort},
		{Proto: "tcp", Addr: loop, Port: mappedPort},
		{Proto: "tcp", Addr: netip.IPv6Unspecified(), Port: mappedPort},
	} {
		if err := Taken([]Bound{b}); !errors.Is(err, ErrShared) {
			t.Errorf("Taken(%+v): %v, want ErrShared", b, err)
		}
	}
	if err := Taken([]Bound{{Proto: "udp", Addr: loop, Port: litePort}}); err != nil {
		t.Errorf("UDP on UDP-Lite's port: %v", err)
	}
	if a, ok := WordsAddr([]uint32{0, 0, 0xffff0000, 0x0100007f}); !ok || a != loop {
		t.Errorf("the words of ::ffff:127.0.0.1: %v, %v", a, ok)
	}
}
