package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// openListener takes the socket systemd passes (socket activation:
// LISTEN_FDS and LISTEN_PID, as gpuschedd.socket does), or else listens on
// path itself. systemd's socket must be a Unix stream socket at path: it
// stays systemd's, so that connections made while the daemon restarts wait
// in its backlog for the next daemon.
func openListener(path, group string) (*socketListener, error) {
	files := activation.Files(true)
	switch {
	case len(files) == 0:
		return listen(path, group)
	case len(files) > 1:
		closeAll(files)
		return nil, fmt.Errorf("socket activation passed %d sockets; gpuschedd serves one (ListenStream=%s)", len(files), path)
	}
	ln, err := net.FileListener(files[0])
	files[0].Close()
	if err != nil {
		return nil, fmt.Errorf("socket activation: the passed fd 3 is not a listening socket: %w", err)
	}
	ul, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return nil, fmt.Errorf("socket activation passed a %s socket at %s; gpuschedd serves a Unix stream socket (ListenStream=%s)", ln.Addr().Network(), ln.Addr(), path)
	}
	if got := ul.Addr().String(); got != path {
		ul.Close()
		return nil, fmt.Errorf("socket activation passed %s but the daemon's socket is %s: make --socket and ListenStream= the same", got, path)
	}
	ul.SetUnlinkOnClose(false)
	return &socketListener{UnixListener: ul, path: path, activated: true}, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

// listen serves path safely: it refuses when a live daemon answers there,
// removes only a stale socket (never another kind of file), and creates
// the socket mode 0660 owned by root and group.
func listen(path, group string) (*socketListener, error) {
	gid := 0
	if group != "" {
		g, err := user.LookupGroup(group)
		if err != nil {
			return nil, fmt.Errorf("socket group %q: %w", group, err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, fmt.Errorf("socket group %q: %w", group, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: %w", path, ErrDaemonRunning)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
	}
	// Bind under a temporary name, set owner and mode, then rename into
	// place: nobody can connect before the mode is right, and no
	// process-wide umask is touched.
	tmp := path + ".new"
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	fail := func(what string, err error) (*socketListener, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("%s socket %s: %w", what, path, err)
	}
	if err := os.Chmod(tmp, 0o660); err != nil {
		return fail("chmod", err)
	}
	if err := os.Chown(tmp, 0, gid); err != nil {
		return fail("chown", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail("place", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail("stat", err)
	}
	return &socketListener{UnixListener: ln, path: path, file: fi}, nil
}

// socketListener removes its socket file on Close, unless another daemon
// has put its own there since or systemd owns it (activated).
type socketListener struct {
	*net.UnixListener
	path      string
	file      os.FileInfo
	activated bool // passed by systemd; its file is never removed
}

func (l *socketListener) Close() error {
	err := l.UnixListener.Close()
	if l.activated {
		return err
	}
	if fi, serr := os.Lstat(l.path); serr == nil && os.SameFile(fi, l.file) {
		os.Remove(l.path)
	}
	return err
}
