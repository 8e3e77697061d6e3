package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpusched/gpusched/pkg/api"
)

// Directory names beside a socket other than the default.
const (
	besideState = "state"
	besideLogs  = "logs"
)

// besideSocket gives a daemon started on a socket other than the default
// its own state and log directories, <socket dir>/state and <socket
// dir>/logs, where set (the file or the command line set that flag) says
// they were not chosen: a second daemon (a trial, a demo) never shares the
// system daemon's records. It refuses a socket directory other users may
// write, such as /tmp, where they could plant those directories first.
func (c *Config) besideSocket(set func(flag string) bool) error {
	if c.Socket == api.DefaultSocket || !filepath.IsAbs(c.Socket) || set("state-dir") && set("log-dir") {
		return nil
	}
	dir := filepath.Dir(c.Socket)
	if err := privateDir(dir); err != nil {
		return fmt.Errorf("--socket %s: the state and logs of a daemon on it go to %s and %s unless --state-dir and --log-dir say otherwise, but %w: give both flags, or put the socket in a directory of its own",
			c.Socket, filepath.Join(dir, besideState), filepath.Join(dir, besideLogs), err)
	}
	if !set("state-dir") {
		c.StateDir = filepath.Join(dir, besideState)
	}
	if !set("log-dir") {
		c.LogDir = filepath.Join(dir, besideLogs)
	}
	return nil
}

// privateDir checks that dir, or its nearest ancestor that exists, belongs
// to root or to this process's user and that no one else may write to it.
func privateDir(dir string) error {
	for {
		fi, err := os.Stat(dir)
		if errors.Is(err, fs.ErrNotExist) && dir != "/" {
			dir = filepath.Dir(dir)
			continue
		}
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return fmt.Errorf("%s has no owner to check", dir)
		case st.Uid != 0 && int(st.Uid) != os.Geteuid():
			return fmt.Errorf("%s belongs to uid %d", dir, st.Uid)
		case fi.Mode().Perm()&0o022 != 0:
			return fmt.Errorf("other users may write to %s (mode %04o)", dir, st.Mode&0o7777)
		}
		return nil
	}
}
