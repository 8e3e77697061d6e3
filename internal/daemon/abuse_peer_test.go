package daemon

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// connectAsEnv makes the test binary a helper that connects to a socket as
// another user and hands the connections back (see connectAs). Its value is
// "uid:gid:group,group:socket"; connectCountEnv, when set, is how many
// connections to make (one helper for many: starting the test binary takes
// a second under the race detector).
const (
	connectAsEnv    = "GPUSCHED_TEST_CONNECT_AS"
	connectCountEnv = "GPUSCHED_TEST_CONNECT_COUNT"
)

// fdsPerMessage is how many descriptors the helper sends per message.
const fdsPerMessage = 64

func init() {
	if spec := os.Getenv(connectAsEnv); spec != "" {
		if err := connectAsHelper(spec); err != nil {
			fmt.Fprintln(os.Stderr, "connect-as helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// connectAsHelper drops to the given uid, gid and groups, connects to the
// socket (so that the daemon's SO_PEERCRED sees that user) and sends the
// connected descriptor over fd 3.
func connectAsHelper(spec string) error {
	parts := strings.SplitN(spec, ":", 4)
	if len(parts) != 4 {
		return fmt.Errorf("bad spec %q", spec)
	}
	uid, _ := strconv.Atoi(parts[0])
	gid, _ := strconv.Atoi(parts[1])
	groups := []int{}
	for _, g := range strings.Split(parts[2], ",") {
		if g != "" {
			n, _ := strconv.Atoi(g)
			groups = append(groups, n)
		}
	}
	// Go applies these to every thread of the process.
	if err := syscall.Setgroups(groups); err != nil {
		return err
	}
	if err := syscall.Setgid(gid); err != nil {
		return err
	}
	if err := syscall.Setuid(uid); err != nil {
		return err
	}
	count := 1
	if c := os.Getenv(connectCountEnv); c != "" {
		count, _ = strconv.Atoi(c)
	}
	for count > 0 {
		var fds []int
		for range min(count, fdsPerMessage) {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			if err := unix.Connect(fd, &unix.SockaddrUnix{Name: parts[3]}); err != nil {
				return fmt.Errorf("connect %s as uid %d: %w", parts[3], uid, err)
			}
			fds = append(fds, fd)
		}
		if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(fds...), nil, 0); err != nil {
			return err
		}
		count -= len(fds)
	}
	return nil
}

// connectAs returns a connection to socket made by u (with extra
// supplementary groups), as the kernel will report it to the daemon.
func connectAs(t testing.TB, socket string, u *user.User, groups ...string) net.Conn {
	t.Helper()
	return connectManyAs(t, socket, u, 1, groups...)[0]
}

// connectManyAs is connectAs n times, through one helper.
func connectManyAs(t testing.TB, socket string, u *user.User, n int, groups ...string) []net.Conn {
	t.Helper()
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := os.NewFile(uintptr(pair[0]), "connect-as"), os.NewFile(uintptr(pair[1]), "connect-as-child")
	defer mine.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), connectAsEnv+"="+u.Uid+":"+u.Gid+":"+strings.Join(groups, ",")+":"+socket,
		connectCountEnv+"="+strconv.Itoa(n))
	cmd.ExtraFiles = []*os.File{theirs}
	out, err := cmd.CombinedOutput()
	theirs.Close()
	if err != nil {
		t.Fatalf("connect as %s: %v: %s", u.Username, err, out)
	}
	var conns []net.Conn
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4*fdsPerMessage))
	for len(conns) < n {
		_, oobn, _, _, err := unix.Recvmsg(int(mine.Fd()), buf, oob, 0)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			t.Fatalf("connect as %s: no descriptor came back: %v", u.Username, err)
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) == 0 {
			t.Fatalf("connect as %s: %v", u.Username, err)
		}
		for _, fd := range fds {
			f := os.NewFile(uintptr(fd), "conn-as-"+u.Username)
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			conns = append(conns, c)
		}
	}
	return conns
}

// rawAs is a raw connection to the harness's daemon made by u.
func (h *harness) rawAs(u *user.User, groups ...string) *rawConn {
	h.t.Helper()
	c := connectAs(h.t, h.cfg.Socket, u, groups...)
	return &rawConn{t: h.t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
}

// call sends one request and returns its final response line, skipping
// any events.
func (rc *rawConn) call(method string, params any) map[string]any {
	rc.t.Helper()
	req := map[string]any{"id": "abuse", "method": method}
	if params != nil {
		req["params"] = params
	}
	b, err := json.Marshal(req)
	if err != nil {
		rc.t.Fatal(err)
	}
	rc.send(string(b))
	for {
		resp := rc.recv()
		if _, ok := resp["event"]; !ok {
			return resp
		}
	}
}

// expectClosed reads until EOF, failing t if the daemon does not close the
// connection within a minute (a guard, not a timing assert).
func (rc *rawConn) expectClosed() []byte {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(time.Minute))
	var rest []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := rc.r.Read(buf)
		rest = append(rest, buf[:n]...)
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				rc.t.Fatalf("connection still open after a minute; read %d bytes", len(rest))
			}
			return rest
		}
	}
}
