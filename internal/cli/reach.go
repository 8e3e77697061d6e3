package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpusched/gpusched/pkg/api"
	"golang.org/x/sys/unix"
)

// dial connects to the daemon within the connect timeout. When the socket
// cannot be reached, the error says why, from what is at its path.
func (a *app) dial(ctx context.Context) (*api.Client, error) {
	if a.connectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.connectTimeout)
		defer cancel()
	}
	c, err := api.Dial(ctx, a.socket)
	if err != nil {
		return nil, a.unreachable(err)
	}
	return c, nil
}

// unreachableError is a daemon socket that could not be connected to: what
// is at its path, and what to do.
type unreachableError struct {
	what, advice string
	err          error // the dial's own error
}

func (e *unreachableError) Error() string { return e.what + ": " + e.advice }
func (e *unreachableError) Unwrap() error { return e.err }

// unreachable explains a failed dial from what is at the socket's path;
// other errors (a timeout) are returned as they are.
func (a *app) unreachable(err error) error {
	if !errors.Is(err, api.ErrDaemonNotRunning) && !errors.Is(err, syscall.EACCES) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	path := api.SocketPath(a.socket)
	e := &unreachableError{err: err}
	fi, serr := os.Stat(path)
	switch {
	case errors.Is(serr, fs.ErrNotExist) || errors.Is(serr, syscall.ENOTDIR):
		e.what = "no daemon socket at " + path
		e.advice = "the daemon is not running, or serves another socket (choose it with --socket PATH or $" + api.SocketEnv + "); " + startAdvice(path)
	case errors.Is(serr, fs.ErrPermission):
		dir := closedDir(path)
		e.what = fmt.Sprintf("cannot reach %s: you may not enter directory %s (%s)", path, dir, ownership(dir))
		e.advice = "ask an administrator to let you in, or to serve the socket elsewhere"
	case serr != nil:
		return err
	case fi.IsDir():
		e.what = path + " is a directory, not the daemon's socket"
		e.advice = a.socketSource() + " names the socket itself (" + api.DefaultSocket + " by default)"
	case fi.Mode().Type() != fs.ModeSocket:
		e.what = fmt.Sprintf("%s is %s, not a socket", path, fileKind(fi.Mode()))
		e.advice = a.socketSource() + " names the daemon's socket (" + api.DefaultSocket + " by default)"
	case errors.Is(err, api.ErrDaemonNotRunning):
		e.what = "nothing listens on " + path
		e.advice = "the daemon that served it has stopped; " + startAdvice(path)
	default:
		e.what = fmt.Sprintf("permission denied on %s (%s)", path, ownership(path))
		e.advice = groupAdvice(fi)
	}
	return e
}

// socketSource says what chose the socket's path.
func (a *app) socketSource() string {
	switch {
	case a.socket != "":
		return "--socket"
	case os.Getenv(api.SocketEnv) != "":
		return "$" + api.SocketEnv
	}
	return "the socket path"
}

// startAdvice says how to start a daemon on path.
func startAdvice(path string) string {
	if path == api.DefaultSocket {
		return "start it as root: systemctl start gpuschedd, or gpuschedd --sim 1 to try it without a GPU"
	}
	return "start one on it as root: gpuschedd --socket " + path + " (add --sim 1 to try it without a GPU)"
}

// groupAdvice tells a caller refused by the socket's permissions who may
// let them in.
func groupAdvice(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "ask an administrator for access"
	}
	group := groupName(st.Gid)
	if st.Gid == 0 {
		return "the daemon lets only root use it; ask an administrator to start it with --group GROUP, a group of the users who may use it"
	}
	me, err := user.Current()
	if err != nil {
		return fmt.Sprintf("only members of group %s may use it; ask an administrator to add you", group)
	}
	if member(me, st.Gid) {
		return fmt.Sprintf("you (%s) are in group %s, but this login session started before you were added: log in again, or run: newgrp %s", me.Username, group, group)
	}
	return fmt.Sprintf("only root and members of group %s may use it; ask an administrator to add you (%s): usermod -aG %s %s, then log in again", group, me.Username, group, me.Username)
}

// member says whether the account database lists u in group gid.
func member(u *user.User, gid uint32) bool {
	ids, err := u.GroupIds()
	return err == nil && slices.Contains(ids, strconv.FormatUint(uint64(gid), 10))
}

// closedDir is the first directory on path's way that this process may
// not enter.
func closedDir(path string) string {
	dir := filepath.Dir(path)
	parts := strings.Split(strings.TrimPrefix(dir, "/"), "/")
	for i := range parts {
		d := "/" + filepath.Join(parts[:i+1]...)
		if unix.Access(d, unix.X_OK) != nil {
			return d
		}
	}
	return dir
}

// ownership shows a file's mode, owner and group: "mode 0660, root:gpusched".
func ownership(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("mode %04o", fi.Mode().Perm())
	}
	owner := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	return fmt.Sprintf("mode %04o, %s:%s", fi.Mode().Perm(), owner, groupName(st.Gid))
}

// groupName is gid's name, or the number when it has none.
func groupName(gid uint32) string {
	id := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(id); err == nil {
		return g.Name
	}
	return id
}

// fileKind names a file type that is not a socket: "a regular file".
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a file of another kind"
}
