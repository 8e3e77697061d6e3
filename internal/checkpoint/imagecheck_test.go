package checkpoint

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
)

// TestCheckImagesOfUnixSockets dumps real trees holding Unix sockets and
// checks what CheckImages makes of their images: a socket bound to a path
// refused for a user's tree (CRIU would unlink and bind at the path as
// root) and passed for root's; a connection no listener outside the tree
// has accepted refused for anyone (no restore can connect it again); an
// abstract listener with such a connection of its own tree passed.
func TestCheckImagesOfUnixSockets(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	c := newTestCRIU(t)
	outside := filepath.Join(testutil.ShortDir(t), "outside.sock")
	l, err := net.Listen("unix", outside) // never accepts
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cases := []struct {
		name, script string
		user, root   error
	}{
		{"bound to a path", `s = socket.socket(socket.AF_UNIX); s.bind(os.path.join(os.getcwd(), "s")); s.listen()`, ErrSocketPath, nil},
		{"abstract, a connection of its own", `s = socket.socket(socket.AF_UNIX); s.bind("\0gs-imagecheck-%d" % os.getpid()); s.listen()
c = socket.socket(socket.AF_UNIX); c.connect(s.getsockname())`, nil, nil},
		{"connected outside, not accepted", `c = socket.socket(socket.AF_UNIX); c.connect("` + outside + `")`, ErrPeerOutside, ErrPeerOutside},
		{"a pair", `a, b = socket.socketpair(socket.AF_UNIX)`, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			log := filepath.Join(work, "job.log")
			cmd := exec.Command("/usr/bin/python3", "-c", "import os, socket, sys, time\n"+tc.script+"\nprint('ready', flush=True)\ntime.sleep(600)")
			cmd.Dir = work
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			testutil.InTree(cmd, log)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			waitLog(t, log, "ready\n")
			dir := imagesDir(t)
			if err := c.Dump(context.Background(), DumpOpts{Dir: dir, PID: cmd.Process.Pid, Leave: LeaveRunning}); err != nil {
				t.Fatal(err)
			}
			if err := CheckImages(dir, true); !errors.Is(err, tc.user) || (tc.user == nil) != (err == nil) {
				t.Errorf("a user's tree: %v; want %v", err, tc.user)
			}
			if err := CheckImages(dir, false); !errors.Is(err, tc.root) || (tc.root == nil) != (err == nil) {
				t.Errorf("root's tree: %v; want %v", err, tc.root)
			}
		})
	}
}
