package daemon

import (
	"bufio"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpusched/gpusched/internal/cgroup"
	"github.com/gpusched/gpusched/internal/testutil"
)

// frozenPeer, run as a user in a cgroup of theirs, connects to the daemon's
// socket (argv[1]), and forks a process that moves itself into another
// cgroup (argv[2]), says "out", waits for a line on stdin, sends argv[3] on
// the connection and prints the first line of the answer. The connecting
// process, the one the daemon sees as its peer, stays in the first cgroup.
const frozenPeer = `
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
if os.fork() == 0:
    with open(os.path.join(sys.argv[2], "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    print("out", flush=True)
    sys.stdin.readline()
    s.sendall(sys.argv[3].encode() + b"\n")
    buf = b""
    while b"\n" not in buf:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    print(buf.split(b"\n")[0].decode(), flush=True)
    os._exit(0)
os.wait()
`

// TestRedTeamFrozenCallerStopsNoReader: a user may connect from a cgroup
// they made, hand the connection to a process outside it, freeze the
// cgroup, and ask for a whole log. A log reader was started into the
// caller's cgroup (clone3 CLONE_INTO_CGROUP), where it never ran: Go starts
// a child as vfork does, its thread waiting, holding its P, until the
// child execs, and the daemon stopped at its next garbage collection, for
// as long as the user kept the cgroup frozen. Now no reader goes to a
// frozen cgroup: the daemon answers itself, and goes on serving.
func TestRedTeamFrozenCallerStopsNoReader(t *testing.T) {
	_, top := testutil.CgroupTop(t)
	u := testutil.NewUser(t, "gslogsfz", "gslogsapg")
	own := userCgroup(t, top, u, true)
	const lines = 10000
	h, spy := talkerWithSpy(t, u, lines)

	mine, other := filepath.Join(own, "mine"), filepath.Join(own, "other")
	shAs(t, u, "mkdir "+mine+" "+other)
	t.Cleanup(func() { shAs(t, u, "echo 0 > "+mine+"/cgroup.freeze") })
	cmd, out, send := frozenPeerAs(t, u, h.cfg.Socket, mine, other, `{"id":1,"method":"logs","params":{"name":"talker","lines":-1}}`)
	defer cmd.Process.Kill()
	shAs(t, u, "echo 1 > "+mine+"/cgroup.freeze")
	awaitFrozen(t, mine)
	send()
	if l := out(); !strings.Contains(l, `"result"`) || !strings.Contains(l, `"`+strconv.Itoa(lines)+`"`) {
		t.Fatalf("logs -n -1 from a frozen caller's cgroup: %.300q; want every line", l)
	}
	if calls, apart := spy.seen(); calls != 1 || apart != 0 {
		t.Fatalf("%d reads, %d answered by a reader; want one asked for and refused", calls, apart)
	}
	runtime.GC() // the daemon runs in this process: no thread of it may hold a P
	if _, err := h.client().Status(ctxT(t)); err != nil {
		t.Fatalf("status after: %v", err)
	}
}

// frozenPeerAs starts frozenPeer as u in cgroup dir, its sender moving
// itself to cgroup away, and waits until it has. send has the sender send
// request; out is the first line of the answer (60 s at most).
func frozenPeerAs(t *testing.T, u testutil.User, socket, dir, away, request string) (cmd *exec.Cmd, out func() string, send func()) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	cmd = exec.Command("/usr/bin/python3", "-c", frozenPeer, socket, away, request)
	cmd.Dir, cmd.Env = "/", []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups()},
		UseCgroupFD: true, CgroupFD: fd}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	r := bufio.NewReader(stdout)
	if l, err := r.ReadString('\n'); l != "out\n" {
		t.Fatalf("the user's sender: %q, %v", l, err)
	}
	answer := make(chan string, 1)
	send = func() {
		stdin.Write([]byte("go\n"))
		go func() { l, _ := r.ReadString('\n'); answer <- l }()
	}
	out = func() string {
		select {
		case l := <-answer:
			return l
		case <-time.After(60 * time.Second):
			t.Fatal("no answer in 60 s")
			return ""
		}
	}
	return cmd, out, send
}

// awaitFrozen waits until cgroup dir is frozen.
func awaitFrozen(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cgroup.Frozen(dir); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s never froze", dir)
		}
	}
}
