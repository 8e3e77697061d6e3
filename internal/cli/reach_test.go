package cli

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpusched/gpusched/internal/testutil"
	"github.com/gpusched/gpusched/pkg/api"
)

// TestUnreachableSocket: a socket that cannot be reached is told apart by
// what is at its path, in one line that says how to go on, and the start
// command it suggests serves that very socket.
func TestUnreachableSocket(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // the socket file stays, with no one listening
	tests := []struct {
		name, socket, env, want string
	}{
		{"missing", missing, "", "no daemon socket at " + missing + ": the daemon is not running, or serves another socket (choose it with --socket PATH or $GPUSCHED_SOCKET); start one on it as root: gpuschedd --socket " + missing + " (add --sim 1 to try it without a GPU)"},
		{"directory", dir, "", dir + " is a directory, not the daemon's socket: --socket names the socket itself (/run/gpusched/gpusched.sock by default)"},
		{"directory from the environment", "", dir, dir + " is a directory, not the daemon's socket: $GPUSCHED_SOCKET names the socket itself (/run/gpusched/gpusched.sock by default)"},
		{"regular file", file, "", file + " is a regular file, not a socket: --socket names the daemon's socket (/run/gpusched/gpusched.sock by default)"},
		{"stale socket", stale, "", "nothing listens on " + stale + ": the daemon that served it has stopped; start one on it as root: gpuschedd --socket " + stale + " (add --sim 1 to try it without a GPU)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(api.SocketEnv, tt.env)
			args := []string{"ps"}
			if tt.socket != "" {
				args = append([]string{"--socket", tt.socket}, args...)
			}
			out, errOut, code := ctl(t, nil, args...)
			if code != 1 || out != "" || errOut != "gpuschedctl: "+tt.want+"\n" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant:\ngpuschedctl: %s", code, out, errOut, tt.want)
			}
		})
	}
	if got := startAdvice(api.DefaultSocket); got != "start it as root: systemctl start gpuschedd, or gpuschedd --sim 1 to try it without a GPU" {
		t.Errorf("start advice for the default socket: %s", got)
	}
}

// TestSocketPermissionsAsUser runs gpuschedctl as real unprivileged users
// against sockets they may not use: each refusal names the socket's mode
// and group and who can let them in; a member gets through.
func TestSocketPermissionsAsUser(t *testing.T) {
	testutil.RequiresRoot(t)
	member := testutil.NewUser(t, "gsfc-member", "gsfc-sock")
	outsider := testutil.NewUser(t, "gsfc-outsider", "gsfc-out")
	dir := testutil.ShortDir(t)
	bin := filepath.Join(dir, "gpuschedctl")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/gpuschedctl").CombinedOutput(); err != nil {
		t.Fatalf("build gpuschedctl: %v\n%s", err, out)
	}
	d := newFakeDaemon(t, map[string]handler{api.MethodPS: answer(result(api.PSResult{Processes: []api.Process{}}))})
	grouped := placeSocket(t, d.path, filepath.Join(dir, "g.sock"), member.GroupGID)
	rootOnly := placeSocket(t, newFakeDaemon(t, nil).path, filepath.Join(dir, "r.sock"), 0)
	closed := filepath.Join(dir, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	inClosed := placeSocket(t, newFakeDaemon(t, nil).path, filepath.Join(closed, "c.sock"), member.GroupGID)

	tests := []struct {
		name   string
		u      testutil.User
		groups []uint32 // the process's supplementary groups
		socket string
		want   string
	}{
		{"not in the group", outsider, outsider.Groups(), grouped, "permission denied on " + grouped + " (mode 0660, root:gsfc-sock): only root and members of group gsfc-sock may use it; ask an administrator to add you (gsfc-outsider): usermod -aG gsfc-sock gsfc-outsider, then log in again"},
		{"added after logging in", member, []uint32{}, grouped, "permission denied on " + grouped + " (mode 0660, root:gsfc-sock): you (gsfc-member) are in group gsfc-sock, but this login session started before you were added: log in again, or run: newgrp gsfc-sock"},
		{"daemon without --group", member, member.Groups(), rootOnly, "permission denied on " + rootOnly + " (mode 0660, root:root): the daemon lets only root use it; ask an administrator to start it with --group GROUP, a group of the users who may use it"},
		{"closed directory", member, member.Groups(), inClosed, "cannot reach " + inClosed + ": you may not enter directory " + closed + " (mode 0700, root:root): ask an administrator to let you in, or to serve the socket elsewhere"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := ctlAsUser(t, bin, tt.u, tt.groups, "--socket", tt.socket, "ps")
			if code != 1 || out != "" || errOut != "gpuschedctl: "+tt.want+"\n" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant:\ngpuschedctl: %s", code, out, errOut, tt.want)
			}
		})
	}
	if out, errOut, code := ctlAsUser(t, bin, member, member.Groups(), "--socket", grouped, "ps"); code != 0 || !strings.HasPrefix(out, "NAME") {
		t.Errorf("a member: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// placeSocket moves the listening socket at from to to, as root:gid with
// mode 0660 (as the daemon makes it), and returns to.
func placeSocket(t *testing.T, from, to string, gid uint32) string {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(to, 0, int(gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(to, 0o660); err != nil {
		t.Fatal(err)
	}
	return to
}

// ctlAsUser runs the gpuschedctl binary bin as u with groups as its
// supplementary groups.
func ctlAsUser(t *testing.T, bin string, u testutil.User, groups []uint32, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: groups}}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("gpuschedctl %v as %s: %v", args, u.Name, err)
	}
	return out.String(), errb.String(), code
}
